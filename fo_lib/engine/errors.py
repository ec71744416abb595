"""The engine's errors, and the check that every rank built the same plan."""
from __future__ import annotations


class PlanError(ValueError):
    """A plan cannot be built, or a call does not match its plan; nothing was launched."""


class CollectiveError(RuntimeError):
    """A group's collective failed (a peer stalled past the timeout, a link error); the message
    names the plan, the group and the rank, and the communicator's own exception is chained."""


def check_plans_agree(comm, fingerprint: dict | None = None, *, error: BaseException | None = None,
                      timeout_s: float | None = None) -> None:
    """Every rank calls this once per plan, before the plan's first collective, also a rank whose
    own build failed (``error``): one exchange of fixed form, so no rank is left waiting in a
    collective its peers never join. Raises on every rank unless every rank built its plan and all
    fingerprints are equal: a rank whose build failed re-raises its own error, the others a
    :class:`PlanError` naming it; differing plans give a :class:`PlanError` naming the first field
    that differs and each rank's value. Communicators of identical virtual ranks (the loopbacks)
    have no ``all_gather_object``: nothing can differ. ``timeout_s`` bounds the wait for the peers
    where the communicator takes it; a failed exchange raises :class:`CollectiveError`."""
    gather = getattr(comm, "all_gather_object", None)
    if gather is None or int(getattr(comm, "world_size", 1)) == 1:
        if error is not None:
            raise error
        return
    mine = {"error": f"{type(error).__name__}: {error}"} if error is not None else fingerprint
    try:
        seen = gather(mine, timeout_s=timeout_s) if timeout_s is not None and _takes_timeout(gather) else gather(mine)
    except Exception as exc:  # a peer that died or stalled while building: the link's own words, named
        first = (str(exc).strip().splitlines() or [""])[0]
        bound = f", timeout {timeout_s:g} s" if timeout_s is not None else ""
        raise CollectiveError(f"rank {comm.rank} of {comm.world_size}: the exchange of plan fingerprints at build "
                              f"failed ({getattr(comm, 'link', '?')}{bound}): {type(exc).__name__}: {first}") from exc
    failed = [(r, fp["error"]) for r, fp in enumerate(seen) if "error" in fp]
    if error is not None:
        raise error
    if failed:
        who = "; ".join(f"rank {r}: {msg}" for r, msg in failed)
        raise PlanError(f"another rank could not build its plan ({who}); no collective ran (rank {comm.rank} "
                        f"raised this)")
    for field, mine_value in fingerprint.items():
        values = [fp.get(field) for fp in seen]
        if any(v != mine_value for v in values):
            per_rank = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
            raise PlanError(f"the ranks built different plans: {field} differs ({per_rank}); every rank "
                            f"must build the same plan (rank {comm.rank} raised this)")


def _takes_timeout(fn) -> bool:
    """Whether ``fn`` takes the ``timeout_s`` keyword (a communicator of the protocol may not)."""
    import inspect

    try:
        return "timeout_s" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
