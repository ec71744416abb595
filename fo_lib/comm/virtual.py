"""What ``W`` identical virtual ranks give back: the semantics both loopback links share.

Every virtual rank holds the same data, so each collective's result is known in closed form:
AllReduce gives ``W * x``; ReduceScatter gives rank ``r`` ``W`` times its chunk; AllGather repeats
the input ``W`` times; All-to-All returns, from every source, the chunk a rank sends to itself.
"""
from __future__ import annotations

from . import CommError, check_counts


def sum_of_copies(src, dst, world_size: int) -> None:
    """``dst = world_size * src`` with torch ops (``dst`` may be ``src``)."""
    if src.data_ptr() != dst.data_ptr():
        dst.copy_(src)
    dst.mul_(world_size)


def repeat(src, dst, world_size: int) -> None:
    """``dst`` = ``src`` repeated ``world_size`` times, by one broadcast kernel."""
    dst.view(world_size, -1).copy_(src.reshape(1, -1).expand(world_size, -1))


def check_sizes(what: str, big, small, world_size: int) -> None:
    """``big`` must hold ``world_size`` chunks the size of ``small`` (ReduceScatter, AllGather)."""
    if big.numel() != small.numel() * world_size:
        raise CommError(f"{what}: {big.numel()} elements where {world_size} x {small.numel()} were expected")


def own_chunk(send, send_counts, recv, recv_counts, world_size: int, rank: int):
    """All-to-All on identical ranks: ``(send counts, the part of send this rank keeps)``; every
    source sends it that part alike, so every receive count must equal this rank's own send count."""
    sc = check_counts(send_counts, world_size, send.numel(), "all_to_all send")
    rc = check_counts(recv_counts, world_size, recv.numel(), "all_to_all recv")
    if any(c != sc[rank] for c in rc):
        raise CommError(f"identical virtual ranks: every source sends rank {rank} {sc[rank]} elements, "
                         f"but recv_counts are {rc}")
    start = sum(sc[:rank])
    return sc, send[start:start + sc[rank]]
