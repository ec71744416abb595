"""What the GPU benchmarks share (the overlap sweep, the timeline): the shapes they run, the
All-to-All routing, rank 0's GEMM profile on every rank, the link's label, and the collective over
the whole output (the non-overlapped baselines' communication)."""
from __future__ import annotations

import dataclasses

import numpy as np

LINK = "emulated (loopback, copy engine)"

SHAPES = [(2048, 8192, 8192), (4096, 8192, 8192), (4096, 8192, 16384), (8192, 8192, 8192),
          (8192, 8192, 16384), (2048, 8192, 16384)]

# The paper's evaluation shapes on non-A800 GPUs (artifact tune/preparation.py): AllReduce and
# ReduceScatter M in {2048, 3072, 4096, 8192} x N 8192 x K in {8192, 16384}; All-to-All M in
# {512, 1024, 2048, 2560} x 8192 x {8192, 16384}. Plus Llama-3-70B at TP=8 (hidden 8192, MLP 28672):
# the attention output projection (K = 8192/8) and the MLP down projection (K = 28672/8) for 4k/8k/16k
# tokens (rows of the GEMM on each rank).
PAPER_SHAPES = {
    "all_reduce": [(m, 8192, k) for m in (2048, 3072, 4096, 8192) for k in (8192, 16384)],
    "reduce_scatter": [(m, 8192, k) for m in (2048, 3072, 4096, 8192) for k in (8192, 16384)],
    "all_to_all": [(m, 8192, k) for m in (512, 1024, 2048, 2560) for k in (8192, 16384)],
}
LLAMA70B_TP8_SHAPES = [(t, 8192, k) for t in (4096, 8192, 16384) for k in (1024, 3584)]
QUICK_SHAPES = [(2048, 8192, 8192), (4096, 8192, 8192), (4096, 8192, 16384)]


def _agree(comm, obj):
    """Rank 0's ``obj`` on every rank (a single-process link has nothing to agree on)."""
    bcast = getattr(comm, "broadcast_object", None)
    return obj if bcast is None else bcast(obj)


def benchmark_routing(M: int, N: int, K: int, world: int):
    """The All-to-All routing of the benchmarks: destinations drawn with Dirichlet(2) skew, seeded by
    the shape, so that every rank and every run sees the same one."""
    from ..engine import Routing

    rng = np.random.default_rng([M, N, K, world])
    dest = rng.choice(world, size=M, p=rng.dirichlet(np.full(world, 2.0)))
    return Routing.from_destinations([dest] * world)


def routed_profile(profile, config, ctas: int, routing):
    """``profile`` with the bytes per wave an All-to-All with ``routing`` really moves (a skewed
    routing moves more off-rank than the output size suggests)."""
    from .. import partition_tuning

    grid = config.grid(profile.M, profile.N, ctas)
    return dataclasses.replace(profile, wave_bytes=partition_tuning.all_to_all_wave_bytes(grid, routing))


def measured_profile(comm, M: int, N: int, K: int, config, ctas: int, routing=None):
    """The GEMM profile on ``ctas`` CTAs (an All-to-All's bytes per wave from ``routing``), rank 0's
    on every rank."""
    from .. import partition_tuning

    profile = partition_tuning.measure_gemm_profile(M, N, K, config=config, ctas=ctas)
    return _agree(comm, profile if routing is None else routed_profile(profile, config, ctas, routing))


def link_label(comm) -> str:
    if comm.link == "emulated":
        return LINK
    return f"{comm.link.upper() if comm.link == 'nccl' else comm.link} ({comm.world_size} GPUs)"


def full_collective(comm, prim, buf, recv, split=None):
    """The collective over the whole GEMM output (the sequential baseline's communication); for
    All-to-All ``split`` is what this rank sends to each rank (default equal parts). Every rank routes
    alike here (the benchmark's routing is the same on all ranks), so each rank receives
    ``split[rank]`` from every source."""
    W, n = comm.world_size, buf.numel()
    if prim == "all_reduce":
        comm.all_reduce(buf)
    elif prim == "reduce_scatter":
        comm.reduce_scatter(buf, recv[:n // W])
    else:
        split = split or [n // W] * W
        mine = split[comm.rank]
        comm.all_to_all(buf[:sum(split)], split, recv[:W * mine], [mine] * W)
