"""One process, no GPU: ``W`` identical virtual ranks on CPU tensors.

The CPU counterpart of :class:`fo_lib.comm.loopback.LoopbackCommunicator` with the same results
(:mod:`fo_lib.comm.virtual`), for ``OverlapPlan(..., device="cpu")`` in a plain Python session:
teaching, the mechanism notebook and quick experiments. It moves no bytes and models no time.
"""
from __future__ import annotations

from . import CommError, virtual


class CpuLoopbackCommunicator:
    """``world_size`` identical virtual ranks in this process; this one is ``rank``."""

    link = "emulated"
    sm_footprint = 0  # nothing runs beside the GEMM on a CPU
    copy_engine = False

    def __init__(self, world_size: int, rank: int = 0):
        if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
            raise CommError(f"world_size must be a positive integer, got {world_size!r}")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world_size:
            raise CommError(f"rank {rank!r} out of range for world size {world_size}")
        self.world_size, self.rank = world_size, rank

    # ``timeout_s``: accepted like the process-group communicator's; nothing here waits for a peer.
    def all_reduce(self, buf, *, timeout_s: float | None = None) -> None:
        virtual.sum_of_copies(buf, buf, self.world_size)

    def reduce_scatter(self, send, recv, *, timeout_s: float | None = None) -> None:
        virtual.check_sizes("reduce_scatter send", send, recv, self.world_size)
        c = recv.numel()
        virtual.sum_of_copies(send[self.rank * c:(self.rank + 1) * c], recv, self.world_size)

    def all_gather(self, send, recv, *, timeout_s: float | None = None) -> None:
        virtual.check_sizes("all_gather recv", recv, send, self.world_size)
        rows = recv.view(self.world_size, -1)
        for r in range(self.world_size):  # send may be row `rank` of recv (an in-place AllGather)
            if rows[r].data_ptr() != send.data_ptr():
                rows[r].copy_(send.reshape(-1))

    def all_to_all(self, send, send_counts, recv, recv_counts, *, timeout_s: float | None = None) -> None:
        _, mine = virtual.own_chunk(send, send_counts, recv, recv_counts, self.world_size, self.rank)
        if mine.numel():
            virtual.repeat(mine, recv, self.world_size)
