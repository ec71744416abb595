"""The engine's errors, and the check that every rank built the same plan."""
from __future__ import annotations


class PlanError(ValueError):
    """A plan cannot be built, or a call does not match its plan; nothing was launched."""


class CollectiveError(RuntimeError):
    """A group's collective failed (a peer stalled past the timeout, a link error); the message
    names the plan, the group and the rank, and the communicator's own exception is chained."""


def check_plans_agree(comm, fingerprint: dict) -> None:
    """Raise :class:`PlanError` on every rank unless every rank's plan has this ``fingerprint``.

    One exchange of fixed form (every rank's fingerprint, whatever it holds), so ranks that differ
    still take part in the same collective and all learn the first field that differs. Communicators
    of identical virtual ranks (the loopbacks) have no ``all_gather_object``: nothing can differ."""
    if int(comm.world_size) == 1:
        return
    gather = getattr(comm, "all_gather_object", None)
    if gather is None:
        return
    seen = gather(fingerprint)
    for field, mine in fingerprint.items():
        values = [fp.get(field) for fp in seen]
        if any(v != mine for v in values):
            per_rank = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
            raise PlanError(f"the ranks built different plans: {field} differs ({per_rank}); every rank "
                            f"must build the same plan (rank {comm.rank} raised this)")
