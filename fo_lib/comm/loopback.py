"""A single-GPU emulated link: ``W`` identical virtual ranks, real bytes through pinned host memory.

Every rank holds the same data, so the collectives' results are known in closed form (AllReduce
gives ``W * x``; ReduceScatter gives rank ``r`` ``W`` times its chunk; AllGather repeats the input;
All-to-All returns the chunk a rank sends to itself from every source). The time is what a ring
over a slow link would take: the bytes one rank of a ring sends (``2 (W-1)/W`` of the buffer for
AllReduce, ``(W-1)/W`` for ReduceScatter and AllGather, the off-rank share for All-to-All) are
copied device -> pinned host -> device with the copy engines (``mode="copy_engine"``, no SM used),
on the current stream. Everything measured with it is labelled "emulated link".
"""
from __future__ import annotations

from . import check_counts

MODES = ("copy_engine",)


class LoopbackCommunicator:
    link = "emulated"
    # SMs to leave free while the GEMM runs: the wait kernel plus the link's scaling/copy kernels.
    # 4 measured on the H200: with 0 nothing overlapped (docs/perf-log.md).
    sm_footprint = 4

    def __init__(self, world_size: int, rank: int = 0, *, mode: str = "copy_engine", device=None):
        import torch

        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} out of range for world size {world_size}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not torch.cuda.is_available():
            raise RuntimeError("the loopback link emulates a link on one GPU: no CUDA GPU is visible")
        self.world_size, self.rank, self.mode = world_size, rank, mode
        self.device = torch.device("cuda", torch.cuda.current_device() if device is None else device)
        self._host = None
        self._scratch = None

    def reserve(self, nbytes: int) -> None:
        """Allocate the staging buffers up front (an overlapped call must not allocate)."""
        import torch

        nbytes = max(int(nbytes), 1)
        if self._host is None or self._host.numel() < nbytes:
            self._host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            self._scratch = torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def _transfer(self, src, volume_bytes: int) -> None:
        """Move ``volume_bytes`` (cycling over ``src``) device -> host -> device on the current stream."""
        import torch

        volume_bytes = int(volume_bytes)
        if volume_bytes <= 0 or src.numel() == 0:
            return
        raw = src.reshape(-1).view(torch.uint8)
        self.reserve(min(volume_bytes, raw.numel()))
        done = 0
        while done < volume_bytes:
            n = min(volume_bytes - done, raw.numel(), self._host.numel())
            self._host[:n].copy_(raw[:n], non_blocking=True)
            self._scratch[:n].copy_(self._host[:n], non_blocking=True)
            done += n

    def all_reduce(self, buf) -> None:
        W = self.world_size
        self._transfer(buf, 2 * (W - 1) * buf.numel() * buf.element_size() // W)
        buf.mul_(W)

    def reduce_scatter(self, send, recv) -> None:
        W = self.world_size
        if send.numel() != recv.numel() * W:
            raise ValueError(f"reduce_scatter: send has {send.numel()} elements, expected {W} x {recv.numel()}")
        self._transfer(send, (W - 1) * send.numel() * send.element_size() // W)
        c = recv.numel()
        recv.copy_(send[self.rank * c:(self.rank + 1) * c]).mul_(W)

    def all_gather(self, send, recv) -> None:
        W = self.world_size
        if recv.numel() != send.numel() * W:
            raise ValueError(f"all_gather: recv has {recv.numel()} elements, expected {W} x {send.numel()}")
        self._transfer(send, (W - 1) * recv.numel() * recv.element_size() // W)
        recv.view(W, -1).copy_(send.reshape(1, -1).expand(W, -1))

    def all_to_all(self, send, send_counts, recv, recv_counts) -> None:
        W, r = self.world_size, self.rank
        sc = check_counts(send_counts, W, send.numel(), "all_to_all send")
        rc = check_counts(recv_counts, W, recv.numel(), "all_to_all recv")
        if any(c != sc[r] for c in rc):
            raise ValueError(f"identical virtual ranks: every source sends rank {r} {sc[r]} elements, "
                             f"but recv_counts are {rc}")
        self._transfer(send, (send.numel() - sc[r]) * send.element_size())
        start = sum(sc[:r])
        mine = send[start:start + sc[r]]
        if sc[r]:
            recv.view(W, -1).copy_(mine.reshape(1, -1).expand(W, -1))
