"""The Hopper GEMM's stream-K tail on a launch: which plan a config runs on a grid
(:func:`stream_k_schedule`, from the planning of :mod:`fo_lib.gemm.stream_k`) and the workspace the
launch keeps for it (:func:`_stream_k_args`). How the tail runs: :mod:`fo_lib.gemm.sm90`.

:data:`IDLE_WARPGROUP_TILE_COST` is read at call time: :func:`fo_lib.gemm.sm90.launch.idle_warpgroup_tile_cost`
sets it here (set it on this module, not on the package, which holds a copy).
"""
from __future__ import annotations

from ..._util import ceil_div
from ..stream_k import last_row_costs, stream_k_finish, stream_k_plan, stream_k_weighted
from .configs import Sm90Config

# The cost, in whole tiles, that the stream-K planner weighs a cooperative tile by whose second warpgroup has no rows
# (the last tile row, where M leaves at most 64 rows in it; that warpgroup walks the stages without MMAs). Alone such a
# tile costs less than a whole one on the H200, but runs weighed by what it costs ran behind the split tail there (they
# cut more tiles than they save), so the planner weighs it as a whole tile and the plan stays stream_k_plan's
# (docs/decisions.md, "The idle warpgroup's tile costs a whole tile").
IDLE_WARPGROUP_TILE_COST = 1.0
# Runs of unequal length replace stream_k_plan's tail only where the busiest CTA saves this share of a
# tile (the plan's split tail starts every part together and cuts fewer tiles).
UNEQUAL_RUNS_MIN_GAIN = 0.05


def stream_k_schedule(cfg: Sm90Config, M: int, N: int, K: int, grid: int) -> tuple:
    """``(sk_tiles, split, bounds or None)`` of a launch of ``cfg`` on ``grid`` CTAs: no tail for a
    config without one, else :func:`stream_k_plan`'s; where the last tile row of a cooperative
    config costs :data:`IDLE_WARPGROUP_TILE_COST` (at most 64 rows of M in it), stream-K runs of
    unequal length (:func:`fo_lib.gemm.stream_k.stream_k_weighted`) where they finish
    :data:`UNEQUAL_RUNS_MIN_GAIN` of a tile sooner."""
    tiles_m, tiles_n, k_blocks = ceil_div(M, cfg.BM), ceil_div(N, cfg.BN), ceil_div(K, cfg.BK)
    tiles = tiles_m * tiles_n
    sk, split = stream_k_plan(tiles, grid, k_blocks) if cfg.stream_k and cfg.cluster == 1 else (0, 0)
    if sk == 0 or cfg.pingpong or not 0 < M % cfg.BM <= 64 or IDLE_WARPGROUP_TILE_COST >= 1:
        return sk, split, None
    cost = last_row_costs(tiles_m, tiles_n, cfg.order, cfg.swizzle, IDLE_WARPGROUP_TILE_COST)
    weighted = stream_k_weighted(tiles, grid, k_blocks, cost)
    if weighted is None or weighted[2] > stream_k_finish(tiles, grid, k_blocks, cost, sk, split) - UNEQUAL_RUNS_MIN_GAIN:
        return sk, split, None
    return weighted[0], 1, weighted[1]


def _stream_k_args(cfg, a, b, grid):
    """The kernel's trailing stream-K arguments ``(sk_tiles, split, partial slots, flags, run bounds)``
    (:func:`stream_k_schedule`; bounds null: equal runs), the buffers the launch keeps: two fp32 slots of
    ``BM x BN`` per CTA (a head or a split part, a parked tail) and one zeroed flag per stream-K tile
    (the finishing CTA resets its flag, so they stay zero between launches; owned by the launch:
    two different launches never share a workspace), and the config whose kernel runs: a launch
    without a tail (none pays on this grid, or built inside a capture) runs the kernel without the
    tail's code, whose k-loop is the faster one."""
    import numpy as np
    import torch

    sk, split, bounds = stream_k_schedule(cfg, a.shape[0], b.shape[0], a.shape[1], grid)
    # Built inside a capture, the flags' zeroing would only be recorded: an eager call of this
    # memoized launch before the graph's first replay would read garbage flags. Whole waves then.
    if sk == 0 or torch.cuda.is_current_stream_capturing():
        return (np.int32(0), np.int32(0), np.uint64(0), np.uint64(0), np.uint64(0)), (), cfg.whole_waves()
    partial = torch.empty(2 * grid * cfg.BM * cfg.BN, dtype=torch.float32, device=a.device)
    flags = torch.zeros(sk, dtype=torch.int32, device=a.device)
    runs = None if bounds is None else torch.as_tensor(bounds, dtype=torch.int64).to(a.device)
    # The zeros are written on this stream; the launch may be enqueued on another one (once per
    # memoized launch: later calls reuse the buffers).
    torch.cuda.current_stream(a.device).synchronize()
    return ((np.int32(sk), np.int32(split), np.uint64(partial.data_ptr()), np.uint64(flags.data_ptr()),
             np.uint64(0 if runs is None else runs.data_ptr())), (partial, flags, runs), cfg)
