"""A single-GPU emulated link: ``W`` identical virtual ranks, real bytes through pinned host memory.

Every rank holds the same data, so the collectives' results are known in closed form
(:mod:`fo_lib.comm.virtual`; the CPU loopback gives the same). The time is what a ring
over a slow link would take: the bytes one rank of a ring sends (``2 (W-1)/W`` of the buffer for
AllReduce, ``(W-1)/W`` for ReduceScatter and AllGather, for All-to-All the off-rank share of the
virtual rank that keeps the fewest rows) are
copied device -> pinned host -> device on the current stream, either by the copy engines
(``mode="copy_engine"``: no SM used) or by a copy kernel of ``ctas`` CTAs that reads and writes the
mapped pinned buffer itself (``mode="sm_copy"``: like NCCL, the link then takes ``ctas`` SMs from a
GEMM running beside it). The results are then finished on the device: the reductions' scale by
``W`` is a small SM kernel (in copy-engine mode the only SM work of the link), the repeats of
AllGather and All-to-All are device copies. Everything measured with it is labelled "emulated link".
"""
from __future__ import annotations

import numpy as np

from .. import jit
from .._util import ceil_div, require_cupy
from . import CommError, virtual

MODES = ("copy_engine", "sm_copy")
SM_COPY_KERNEL = "fo_sm_copy16"
SCALE_KERNELS = {"bf16": "fo_scale16_bf16", "f16": "fo_scale16_f16"}
SCALE_UNROLL = 4
SCALE_THREADS = 256
# One source for the link's kernels (fo_lib/cuda/link_emulation.cuh).
LINK_SOURCE = f"""#include "link_emulation.cuh"
extern "C" __global__ void {SM_COPY_KERNEL}(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                           unsigned long long n) {{
  fo::copy16(src, dst, n);
}}
extern "C" __global__ void {SCALE_KERNELS["bf16"]}(const fo::bits16* src, fo::bits16* dst,
                                                 unsigned long long n, float scale) {{
  fo::scale16<fo::bf16_tag, {SCALE_UNROLL}>(src, dst, n, scale);
}}
extern "C" __global__ void {SCALE_KERNELS["f16"]}(const fo::bits16* src, fo::bits16* dst,
                                                unsigned long long n, float scale) {{
  fo::scale16<fo::f16_tag, {SCALE_UNROLL}>(src, dst, n, scale);
}}
"""


def compile_check_sources():
    yield "link_emulation", LINK_SOURCE


class LoopbackCommunicator:
    link = "emulated"
    # SMs to leave free while the GEMM runs: the wait kernel plus the link's scaling and copy
    # kernels (with none left, nothing overlapped on the H200).
    sm_footprint = 4

    def __init__(self, world_size: int, rank: int = 0, *, mode: str = "copy_engine", ctas: int = 8,
                 device=None):
        import torch

        if not isinstance(world_size, int) or world_size < 1:
            raise CommError(f"world_size must be a positive integer, got {world_size!r}")
        if not 0 <= rank < world_size:
            raise CommError(f"rank {rank} out of range for world size {world_size}")
        if mode not in MODES:
            raise CommError(f"mode must be one of {MODES}, got {mode!r}")
        if not torch.cuda.is_available():
            raise RuntimeError("the loopback link emulates a link on one GPU: no CUDA GPU is visible")
        if mode == "sm_copy" and (not isinstance(ctas, int) or ctas < 1):
            raise CommError(f"ctas must be a positive integer for mode='sm_copy', got {ctas!r}")
        self.world_size, self.rank, self.mode = world_size, rank, mode
        self.ctas = ctas if mode == "sm_copy" else 0
        if mode == "sm_copy":
            self.sm_footprint = ctas  # the copy kernel's CTAs (the wait kernel fits beside a GEMM CTA)
        self._kernel = None
        self._scales = jit.LaunchMemo(64)
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
            if self.mode == "copy_engine":
                self._host[:n].copy_(raw[:n], non_blocking=True)
                self._scratch[:n].copy_(self._host[:n], non_blocking=True)
            else:
                self._sm_copy(raw, n)
            done += n

    def _sm_copy(self, raw, n: int) -> None:
        """``n`` bytes from ``raw`` to the pinned buffer and back, by ``ctas`` CTAs. Only the volume
        matters here, so the source is read from its 16-byte-aligned start and ``n`` rounded down."""
        import torch

        if self._kernel is None:
            with require_cupy().cuda.Device(self.device.index):
                self._kernel = jit.get_kernel(LINK_SOURCE, SM_COPY_KERNEL)
        vecs = n // 16
        if vecs == 0:
            return
        base = raw.data_ptr() & ~15
        stream = torch.cuda.current_stream(self.device)
        for src, dst in ((base, self._host.data_ptr()), (self._host.data_ptr(), self._scratch.data_ptr())):
            jit.launch(self._kernel, (self.ctas,), (512,), (np.uint64(src), np.uint64(dst), np.uint64(vecs)),
                           stream=stream, device_index=self.device.index)

    def _sum_of_copies(self, src, dst) -> None:
        """``dst = W * src`` (``dst`` may be ``src``): what a sum over ``W`` identical ranks gives.
        Contiguous 16-bit tensors on 16-byte boundaries go through the link's scale kernel
        (link_emulation.cuh, launched once per pair of addresses), anything else through torch."""
        import torch

        W = self.world_size
        dtype = {torch.bfloat16: "bf16", torch.float16: "f16"}.get(dst.dtype)
        if (dtype is None or src.dtype != dst.dtype or src.numel() != dst.numel() or not src.is_contiguous()
                or not dst.is_contiguous() or src.data_ptr() % 16 or dst.data_ptr() % 16):
            virtual.sum_of_copies(src, dst, W)
            return
        if dst.numel():
            self._scales.get_or_build(jit.memo_key((dtype, W), src, dst),
                                      lambda: self._scale_launch(src, dst, dtype))()

    def _scale_launch(self, src, dst, dtype: str):
        import torch

        dev = dst.device.index
        with require_cupy().cuda.Device(dev):
            kernel = jit.get_kernel(LINK_SOURCE, SCALE_KERNELS[dtype])
        n = dst.numel()
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        blocks = max(1, min(ceil_div(n, 8 * SCALE_THREADS * SCALE_UNROLL), 8 * sms))
        args = (jit.ptr(src), jit.ptr(dst), np.uint64(n), np.float32(self.world_size))
        return jit.PreparedLaunch(kernel, (blocks,), (SCALE_THREADS,), args, device_index=dev)

    def all_reduce(self, buf, *, timeout_s: float | None = None) -> None:
        W = self.world_size
        self._transfer(buf, 2 * (W - 1) * buf.numel() * buf.element_size() // W)
        self._sum_of_copies(buf, buf)

    def reduce_scatter(self, send, recv, *, timeout_s: float | None = None) -> None:
        W = self.world_size
        virtual.check_sizes("reduce_scatter send", send, recv, W)
        self._transfer(send, (W - 1) * send.numel() * send.element_size() // W)
        c = recv.numel()
        self._sum_of_copies(send[self.rank * c:(self.rank + 1) * c], recv)

    def all_gather(self, send, recv, *, timeout_s: float | None = None) -> None:
        W = self.world_size
        virtual.check_sizes("all_gather recv", recv, send, W)
        self._transfer(send, (W - 1) * recv.numel() * recv.element_size() // W)
        self._repeat(send, recv)

    def all_to_all(self, send, send_counts, recv, recv_counts, *, timeout_s: float | None = None) -> None:
        sc, mine = virtual.own_chunk(send, send_counts, recv, recv_counts, self.world_size, self.rank)
        # Every virtual rank routes alike, and a collective ends with its slowest rank: the one that
        # keeps the fewest of its own rows moves the most off-rank (what the model counts as well,
        # fo_lib.partition_tuning.all_to_all_wave_bytes).
        self._transfer(send, (send.numel() - min(sc)) * send.element_size())
        if mine.numel():
            self._repeat(mine, recv)

    def _repeat(self, src, dst) -> None:
        """``dst`` = ``src`` repeated ``world_size`` times. In copy-engine mode as ``world_size``
        contiguous device copies, which torch hands to ``cudaMemcpyAsync`` (copy engines): one
        broadcast kernel instead got only the SMs a GEMM beside it left free, and its stride-0
        source made it slow there. In SM-copy mode the link's SMs do
        it. ``src`` may be ``dst``'s row ``rank`` (an in-place AllGather): the other rows are then
        device copies in either mode."""
        rows = dst.view(self.world_size, -1)
        if src.data_ptr() == rows[self.rank].data_ptr():  # in place: src already is this rank's row
            for r, row in enumerate(rows):
                if r != self.rank:
                    row.copy_(src.reshape(-1))
        elif self.mode == "copy_engine":
            for row in rows:
                row.copy_(src.reshape(-1))
        else:
            virtual.repeat(src, dst, self.world_size)
