"""The per-call agreement check: before a call's first collective, every rank shows every other rank
which plan it calls, how many calls of it came before, and whether it accepted its own inputs.

Build-time agreement (:func:`fo_lib.engine.errors.check_plans_agree`) makes every rank build the
same plans; it cannot stop rank 0 calling plan A while rank 1 calls plan B of the same group sizes,
whose collectives then pair up and mix data silently. One all_gather of four int64 per rank and call
(:class:`CallCheck`) catches that, and lets a rank that refused its inputs tell its peers, instead
of leaving them to time out in a collective it never joins.
"""
from __future__ import annotations

import hashlib

from .errors import PlanError

# Every plan this process built, by digest: a rank names the plan another rank called from the
# digest alone (every rank built the same plans, so each one knows the other's).
_LABELS: dict[int, str] = {}
OPS = {"run": 0, "all_gather": 1}
_OP_NAMES = {v: k for k, v in OPS.items()}


def plan_digest(fingerprint: dict) -> int:
    """63 bits of a hash of a plan's fingerprint: equal plans, equal digests."""
    text = repr(sorted(fingerprint.items())).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") & (2 ** 63 - 1)


def plan_label(plan) -> str:
    return (f"{plan.primitive} {plan.M}x{plan.N}x{plan.K} {plan.dtype} partition {list(plan.partition)} "
            f"({plan.num_groups} groups)")


def takes_part(plan) -> bool:
    """Whether calls of ``plan`` run the check: real peers (a communicator with ``all_gather_object``,
    as for build-time agreement) whose collectives block the host (the CPU executor). The loopbacks'
    ranks are copies of this one: nothing can differ. On CUDA a check would stall the host on the
    stream before every call, so CUDA calls are not checked."""
    comm = plan.comm
    return (plan.device == "cpu" and plan.world_size > 1 and getattr(comm, "all_gather_object", None) is not None
            and hasattr(comm, "all_gather"))


def first_collective(plan, op: str) -> str:
    """The collective a call of ``op`` starts with, as a failure names it (the check runs just before)."""
    if op == "all_gather":
        return "the all_gather restoring the rows"
    s, e = plan.slices[0]["send"]
    return f"the {plan.buffer_layout.collective} of group 1 of {plan.num_groups} ({e - s} elements)"


def _name(digest: int) -> str:
    return _LABELS.get(digest, f"a plan this rank never built (digest {digest:x})")


class CallCheck:
    """The check of one plan's calls; the count advances only on calls every rank accepted."""

    def __init__(self, plan):
        import torch

        self.active = takes_part(plan)
        self.digest = plan_digest(plan.fingerprint())
        self.label = _LABELS[self.digest] = plan_label(plan)
        self.calls = 0
        self.send = torch.zeros(4, dtype=torch.int64)
        self.recv = torch.zeros(4 * plan.world_size, dtype=torch.int64)

    def agree(self, plan, op: str, validate) -> None:
        """Validate this rank's inputs (``validate()``, which changes nothing), then check with every
        rank that all call the same plan at the same count and accepted their inputs."""
        try:
            validate()
            error = None
        except PlanError as exc:
            error = exc
        self(plan, op, error, plan.executor.collective_kw)

    def __call__(self, plan, op: str, error: BaseException | None, kw: dict) -> None:
        """Exchange (plan, call count, op, inputs accepted) with every rank; raise ``error`` (this
        rank's refusal of its inputs) or a :class:`PlanError` on every rank unless all agree."""
        if not self.active:
            if error is not None:
                raise error
            self.calls += 1
            return
        self.send.copy_(self.send.new_tensor([self.digest, self.calls, OPS[op], error is not None]))
        with plan._naming_failures(f"{first_collective(plan, op)}, at the call check before it (after {self.calls} "
                                   "calls of this plan),", kw):
            plan.comm.all_gather(self.send, self.recv, **kw)
        seen = [tuple(int(v) for v in row) for row in self.recv.view(plan.world_size, 4)]
        mine = seen[plan.rank]
        if any((d, o) != (mine[0], mine[2]) for d, _, o, _ in seen):
            per_rank = "; ".join(f"rank {r}: {_OP_NAMES.get(o, o)} of {_name(d)} after {c} calls"
                                 for r, (d, c, o, _) in enumerate(seen))
            raise PlanError(f"the ranks called different plans ({per_rank}); every rank must call the same plan "
                            f"in the same order, so no collective ran (rank {plan.rank} raised this)")
        if error is not None:
            raise error
        refused = [r for r, row in enumerate(seen) if row[3]]
        if refused:
            raise PlanError(f"rank(s) {refused} refused their inputs to this call of {self.label}; no collective "
                            f"ran (rank {plan.rank} raised this)")
        counts = {c for _, c, _, _ in seen}
        if len(counts) > 1:
            # Equal plans built apart (equal digests) may differ in count: resynchronised, so the
            # plan stays usable, but reported, since the ranks' call orders differ.
            self.calls = max(counts)
            per_rank = ", ".join(f"rank {r}: after {c} calls" for r, (_, c, _, _) in enumerate(seen))
            raise PlanError(f"the ranks are at different calls of {self.label} ({per_rank}); no collective ran "
                            f"(rank {plan.rank} raised this)")
        self.calls += 1
