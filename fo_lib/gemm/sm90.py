"""The Hopper GEMM ``C = A @ B^T`` (sm_90a: TMA + wgmma, warp-specialized, persistent) and its
FlashOverlap epilogues (host side). Same public API and epilogue semantics as
:mod:`fo_lib.gemm.portable`.

Device code: ``fo_lib/cuda/gemm_sm90.cuh`` (the tile schedule is ``fo_lib/cuda/tile_schedule.cuh``,
shared with the portable kernel, so :class:`fo_lib.tiling.TileGrid` predicts the waves of both).

* ``A`` is ``M x K`` row-major, ``B`` is the ``nn.Linear`` weight ``N x K`` row-major ("NT"); bf16 or
  fp16, fp32 accumulation, output in the input type. Needs a compute capability 9.0 GPU.
* Operands are read by TMA through 2-D tensor maps (:mod:`fo_lib.gemm.tma`, cached). TMA
  fills everything outside ``M x K`` / ``N x K`` with zeros, so ``M``, ``N`` and ``K`` tails need no
  special case. ``K`` must still be a multiple of 8 (and row strides too): a tensor map's row stride
  must be a multiple of 16 bytes. Operands must be 16-byte aligned.
* Tile ``128 x BN x 64`` (``BN`` a multiple of 8 in [128, 256], of 16 in clusters), 384 threads: one producer warpgroup (a TMA warp and
  three store warps) and two consumer warpgroups (64 rows each). ``stages`` is the depth of the
  operand ring. Run-time raster (``order``, ``swizzle``) and CTA count (``ctas``) as in
  fo_lib.gemm.portable.
* Epilogues: ``plain`` stores ``C``; ``signal`` stores row ``i`` of tile column ``tn`` at
  ``comm_buf[row_offset[i, tn] + c]`` then adds 1 to ``group_counter[tile_group[tile_id]]`` (release,
  gpu scope, never reset); ``signal_rows`` stores ``C`` row-major into ``comm_buf`` and
  ``signal_tiles`` each tile at its place (fo_lib.gemm.portable), both signalling the same way;
  ``probe`` stores ``C`` and records per tile ``(start ns, end ns, smid, cta)``; ``scatter`` is
  ``signal`` without the counter. The stores, the release and the probe's end stamp are done by the
  store warps after the consumers hand the tile over in shared memory (``direct_c`` configs: the
  consumers store the tile themselves, the store warps publish it), so a tile's probe interval
  may overlap the next tile's start on the same CTA (start = the consumers begin the tile's main
  loop, end = the tile is in global memory: the moment the signal is sent).
* Clusters (``Sm90Config.cluster = 2``, the ``...c2`` configs): CTA pairs run schedule indices
  2 i and 2 i + 1 in step and, where both tiles lie in one tile column (one tile row), load half of
  the shared B (A) tile each by TMA multicast. ``ctas`` must be even; no stream-K tail; the schedule (and so
  the wave model) is that of single CTAs. :func:`cluster_capacity` is the driver's count of
  clusters that fit at once (66 of 2 on an H200).
* Stream-K tail (``Sm90Config.stream_k``): when the last wave would leave at least
  :data:`STREAM_K_MIN_IDLE` of the GEMM's CTA time idle, it is shared by more CTAs
  (:func:`stream_k_plan`). Where it has at most half as many tiles as CTAs, each of its tiles runs as
  2-4 equal k ranges side by side (the split tail: the last range adds the others from the
  workspace and runs the epilogue). Otherwise the last partial wave and one full wave
  before it are spread over every CTA as equal runs of k-blocks (:func:`stream_k_tiles`). The
  kernel also takes runs of unequal length that even out the CTAs' costs where the last tile row of
  a cooperative config holds at most 64 rows of M (its second warpgroup has no rows and skips its
  MMAs there; :func:`stream_k_schedule`), planned only where such a tile weighs less than a whole
  one (:data:`IDLE_WARPGROUP_TILE_COST`, a whole tile on the H200). A tile cut
  between two CTAs is summed in fp32 through a workspace (two ``BM x BN`` float slots per CTA: 35 MB
  for 128 x 256 on 132 CTAs) by the CTA that holds its last k-block, which then runs the tile's
  epilogue as usual (who waits on whom: gemm_sm90.cuh's header, docs/design-notes.md). Each
  memoized launch owns its workspace; a launch first built inside a CUDA-graph capture runs whole
  waves (its flags could not be zeroed before an eager call), and so does the probe (it times waves).
  Off in the configs the overlap engine runs (its wave model counts whole waves):
  :func:`fo_lib.gemm.auto_config` picks in whole waves, :func:`default_config` (a plain ``gemm_nt``)
  takes the tail where the tile table predicts it pays.
* Autotuning (:mod:`fo_lib.gemm.autotune`): a plain ``gemm_nt`` without a config, on the SM count's
  CTAs, runs the fastest of the tile table's shortlist for its shape (the model's pick among them:
  :func:`tuning_candidates`), timed on its operands on the shape's first call and remembered on disk for later calls and
  processes; :func:`config_for` says which. ``FO_SM90_AUTOTUNE=0``: the table's pick, untimed.

``import fo_lib.gemm.sm90`` needs neither torch, CuPy nor cuda-bindings; they are imported at launch.
"""
from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache

from .._util import ceil_div, sm_count
from ..tiling import (STREAM_K_MIN_IDLE, last_row_costs, stream_k_finish, stream_k_plan, stream_k_tiles,
                      stream_k_weighted)
from . import autotune, tile_table
from .checks import check_operands
from .config import MAX_SMEM, GemmError, pick_by_waves
from .family import GemmFamily
from .tma import driver, operand_desc, tma_desc_fields
from .sm90_configs import CONFIGS, MID_WIDTHS, ODD_WIDTHS, PINGPONG_DIRECT_WIDTHS, Sm90Config, c_row_bytes
from .sm90_source import compile_check_sources, compiled_variants, generate_source, kernel_name

__all__ = ["Sm90Config", "CONFIGS", "MID_WIDTHS", "ODD_WIDTHS", "PINGPONG_DIRECT_WIDTHS", "c_row_bytes", "default_config", "config_for", "config_label", "stream_k_tiles", "stream_k_plan", "STREAM_K_MIN_IDLE",
           "guess_config",
           "predict_ms", "gemm_nt", "gemm_nt_signal",
           "gemm_nt_scatter", "gemm_nt_probe", "generate_source", "kernel_name", "compiled_variants", "compile_check_sources", "tma_desc_fields", "is_supported",
           "GemmError", "sm_count"]

ARCH = "sm_90a"



# The table-free fallback (no measured table for this GPU): relative full-tile throughput per unit
# area, a GUESS (the bigger tile reuses each A/B byte twice as often), fed to pick_by_waves. With a
# table (fo_lib.gemm.tile_table) the measured wave times replace it.
_TILE_SPEED = {"128x256x64": 1.0, "128x128x64": 0.9}
_GUESS_CANDIDATES = ("128x256x64", "128x128x64")
# What the measured table chooses among (scripts/bench/record_sm90_tiles.py records each of them).
CANDIDATES = tuple(CONFIGS)


def candidate_pool(stream_k: bool = True) -> dict:
    """The :data:`CANDIDATES` as the picker weighs them: with a stream-K tail where ``stream_k``
    (clusters run whole waves). The cooperative direct-C configs are recorded but not picked: a
    run's config for them (their deeper ring pays on few waves, their epilogue, on the consumers'
    path, costs on many). Timed as the LLM benchmark times, the best of them beat the shortlist's
    best by about 1 % on 3 of its 30 shapes (long K) and lost elsewhere (docs/perf-log.md). The
    ping-pong ones store under the other warpgroup's MMAs, and are weighed."""
    return {n: replace(CONFIGS[n], stream_k=stream_k and CONFIGS[n].cluster == 1) for n in CANDIDATES
            if not CONFIGS[n].direct_c or CONFIGS[n].pingpong}


def default_config(M: int, N: int, K: int, sm_count: int = 132, smem_limit: int = MAX_SMEM,
                   stream_k: bool = True) -> Sm90Config:
    """The tile config and raster for ``M x N x K`` on ``sm_count`` CTAs; ``stream_k=False``: the best
    in whole waves (what the overlap engine and its profiles run), not the best whole-wave tile of a
    stream-K pick.

    With a measured table for the current GPU (``data/<gpu>/gemm_sm90_tiles.csv`` under
    ``fo_lib.provenance.DATA_DIR``, or the file ``$FO_SM90_TILES`` names): the wave-quantization model
    of :mod:`fo_lib.gemm.tile_table` over every recorded (tile, order, swizzle): waves (M/N tails
    counted as whole tiles; a partial last wave shared by more CTAs where a stream-K tail pays,
    ``stream_k=True``) x measured time of one full wave at this K; the fastest wins, ties within
    1 % to the bigger tile, then no cluster, then the wider swizzle.

    Without one (a CPU, another GPU, or ``FO_SM90_TILES=guess``): the documented guess, the
    wave-count model of :func:`fo_lib.gemm.pick_by_waves` with ``_TILE_SPEED`` (estimated time =
    waves x padded tile area / tile speed, the smaller tile must win by 3 %), row order in bands of
    up to 8 tile rows, swizzle 1 when everything fits in one wave; no stream-K (unmeasured there)."""
    path = tile_table.table_path()
    # The file's mtime in the cache key: a table re-recorded in this process is read again.
    mtime = os.stat(path).st_mtime_ns if path else 0
    return _default_config(M, N, K, sm_count, smem_limit, path, mtime, bool(stream_k))


def guess_config(M: int, N: int, K: int, sm_count: int = 132, smem_limit: int = MAX_SMEM) -> Sm90Config:
    """The table-free pick (the documented guess above), whatever table there is."""
    return pick_by_waves({n: CONFIGS[n] for n in _GUESS_CANDIDATES}, _TILE_SPEED, M, N, K, sm_count, smem_limit,
                         family="sm90")


@lru_cache(maxsize=1024)
def _default_config(M, N, K, sm_count, smem_limit, path, mtime, stream_k) -> Sm90Config:
    if path is None:
        return guess_config(M, N, K, sm_count, smem_limit)
    # Clusters run whole waves (no stream-K tail).
    return tile_table.pick(tile_table.load(path, CONFIGS), candidate_pool(stream_k), M, N, K, sm_count, smem_limit)


def predict_ms(cfg: Sm90Config, M: int, N: int, K: int, sm_count: int = 132, path=None) -> float | None:
    """The table model's predicted ms of ``cfg`` (tile, order, swizzle) on ``M x N x K``; None
    without a table (``path``: default, the table :func:`default_config` reads now)."""
    path = path or tile_table.table_path()
    if path is None:
        return None
    name = next((n for n, c in CONFIGS.items() if c.tile_name == cfg.tile_name), None)
    if name is None:
        raise GemmError(f"{cfg.tile_name} is not one of the recorded CONFIGS {sorted(CONFIGS)}")
    return tile_table.predict_ms(tile_table.load(path, CONFIGS), name, cfg, M, N, K, sm_count)


# --- launch -------------------------------------------------------------------------------------
def cluster_capacity(cfg: Sm90Config, dtype: str = "bf16", device_index: int | None = None) -> int:
    """How many clusters of ``cfg`` can be resident at once on a device (the driver's
    ``cuOccupancyMaxActiveClusters``): a persistent grid of clusters beyond it would run a second,
    late round. ``cfg.cluster == 1``: the SM count."""
    import torch
    dev = torch.cuda.current_device() if device_index is None else device_index
    if cfg.cluster == 1:
        return sm_count(dev)
    import cupy
    drv = driver()
    kernel = SM90.kernel(cfg, dtype, "plain", dev)
    lc = drv.CUlaunchConfig()
    lc.gridDimX, lc.gridDimY, lc.gridDimZ = 2 * sm_count(dev), 1, 1
    lc.blockDimX, lc.blockDimY, lc.blockDimZ = cfg.threads, 1, 1
    lc.sharedMemBytes = cfg.smem_bytes
    attr = drv.CUlaunchAttribute()
    attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cfg.cluster, 1, 1
    lc.attrs, lc.numAttrs = [attr], 1
    with cupy.cuda.Device(dev):  # the function and the query in that device's context
        err, n = drv.cuOccupancyMaxActiveClusters(drv.CUfunction(kernel.kernel.ptr), lc)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise GemmError(f"cuOccupancyMaxActiveClusters failed ({err}) for {cfg.tile_name}")
    return int(n)


def is_supported(device=None) -> bool:
    """Whether ``device`` (default: the current one) can run this kernel (compute capability 9.0)."""
    try:
        import torch
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device) == (9, 0)
    except Exception:  # noqa: BLE001 - no torch / no driver
        return False


def _check_config(config) -> None:
    if config is not None and not isinstance(config, Sm90Config):
        raise GemmError(f"config must be an fo_lib.gemm.sm90.Sm90Config, got {type(config).__name__} "
                        "(fo_lib.gemm.GemmConfig belongs to the portable kernel)")


def _operands(a, b, config, ctas):
    _check_config(config)
    dtype, M, N, K, cfg, ctas = check_operands(a, b, config, ctas, pick_default=default_config)
    import torch
    cap = torch.cuda.get_device_capability(a.device)
    if cap != (9, 0):
        raise GemmError(f"fo_lib.gemm.sm90 needs a compute capability 9.0 GPU (TMA + wgmma), "
                        f"{a.device} is {cap[0]}.{cap[1]}: use fo_lib.gemm")
    if config is None:  # picked for the SM count: on an odd ctas, the same tiles one CTA at a time
        cfg = _tuned(a, b, dtype, M, N, K, ctas, cfg).for_ctas(ctas)
    if ctas % cfg.cluster:
        raise GemmError(f"config {cfg.tile_name} runs clusters of {cfg.cluster} CTAs: ctas must be a multiple "
                        f"of {cfg.cluster}, got {ctas}")
    return dtype, M, N, K, cfg, ctas


def config_label(cfg: Sm90Config) -> str:
    """``128x256x64/row8`` (``+sk`` with a stream-K tail): the CONFIGS name, raster order, swizzle."""
    name = next((n for n, c in CONFIGS.items() if c.tile_name == cfg.tile_name), cfg.tile_name)
    return f"{name}/{cfg.order}{cfg.swizzle}" + ("+sk" if cfg.stream_k else "")


def kernel_digest(dtype: str) -> str:
    """The digest under which tunings of ``dtype`` GEMMs are remembered: the compiler's cache keys of
    every candidate's plain kernel (with and without its stream-K tail), how they are timed (``autotune.TIMING``) and the one-wave rasters
    (a change to a source, a header, the NVRTC options or version, the configs, what autotuning
    weighs or how it times makes them tune again). Needs NVRTC (its version is part of the key)."""
    from ..jit.compiler import nvrtc_options
    return _kernel_digest(dtype, nvrtc_options(ARCH))


@lru_cache(maxsize=16)
def _kernel_digest(dtype: str, options: tuple) -> str:
    # Once per (dtype, options) and process, like the compiler's header snapshot (~0.1 s).
    from ..jit.compiler import source_key
    # Over the picker's pool: a tuning that weighed other configs (the cooperative direct-C ones) does not apply.
    builds = [v for c in candidate_pool().values() for v in dict.fromkeys((c, c.whole_waves()))]
    return autotune.digest([autotune.TIMING, repr(ONE_WAVE_RASTERS), repr(autotune.ONE_WAVE_SINGLE_CTA)] + [
        f"{v.kernel_id} {source_key(generate_source(v, dtype, 'plain')[0], ARCH)}" for v in builds])


# The rasters autotuning tries for a one-wave grid: bands of 1, 2 and 8 tile rows, and of 8 columns.
ONE_WAVE_RASTERS = (("row", 1), ("row", 2), ("row", 8), ("col", 8))


def one_wave(cfg: Sm90Config, M: int, N: int, ctas: int) -> bool:
    """Whether ``cfg``'s tiles of ``M x N`` fit one wave of ``ctas`` CTAs (autotuning times more
    rasters there, after an idle)."""
    return cfg.grid(M, N, ctas).num_tiles <= ctas


def tuning_handicap(configs, model: Sm90Config, M: int, N: int, ctas: int) -> dict:
    """``{config_label: factor}`` for :func:`fo_lib.gemm.autotune.choose`: on a grid of one wave of the
    model's tiles, each single-CTA candidate's time counts ``autotune.ONE_WAVE_SINGLE_CTA`` more."""
    one = one_wave(model, M, N, ctas)
    return {config_label(c): 1 + autotune.ONE_WAVE_SINGLE_CTA for c in configs if one and c.cluster == 1}


def tuning_pick(ms: dict, configs, model: Sm90Config, M: int, N: int, ctas: int) -> str:
    """The label autotuning picks from its timings ``ms`` of ``configs`` (:func:`time_candidates`):
    :func:`fo_lib.gemm.autotune.choose` with :func:`tuning_handicap`."""
    return autotune.choose(ms, config_label(model), tuning_handicap(configs, model, M, N, ctas))


def tuning_settle_s(model: Sm90Config, M: int, N: int, ctas: int) -> float:
    """Seconds of idle before autotuning's timed rounds: :data:`fo_lib.gemm.autotune.SETTLE_S` on a
    grid of one wave of the model's tiles, else none."""
    return autotune.SETTLE_S if one_wave(model, M, N, ctas) else 0.0


def tuning_candidates(path, M: int, N: int, K: int, ctas: int, model: Sm90Config) -> list:
    """What autotuning times for ``M x N x K`` on ``ctas`` CTAs: :func:`fo_lib.gemm.autotune.shortlist`
    of the tile table at ``path``'s ranking of the picker's pool, with the model's pick ``model`` and
    the table-free guess; on a grid of one wave of the model's tiles, each of those in every raster
    of :data:`ONE_WAVE_RASTERS` too."""
    ranked = tile_table.ranked(tile_table.load(path, CONFIGS), candidate_pool(), M, N, K, ctas, MAX_SMEM)
    out = autotune.shortlist(ranked, model, also=(guess_config(M, N, K, ctas),))
    # One wave: the table ranks a single raster per tile (it recorded whole waves of many), yet where
    # the tiles land still moves the time (clusters most): each shortlisted tile in a few rasters.
    if one_wave(model, M, N, ctas):
        more = (c.with_raster(o, s) for c in out for o, s in ONE_WAVE_RASTERS
                if s <= (ceil_div(M, c.BM) if o == "row" else ceil_div(N, c.BN)))  # (wider walks like narrower)
        out += list(dict.fromkeys(c for c in more if c not in out))
    return out


def _tuned(a, b, dtype, M, N, K, ctas, model: Sm90Config) -> Sm90Config:
    """The config a plain call runs: the tile table's pick ``model``, or where autotuning applies
    (:mod:`fo_lib.gemm.autotune`: on, a tile table, the SM count's CTAs) the fastest of the model's
    shortlist, timed on these operands on the shape's first call outside a CUDA-graph capture and
    remembered on disk. A tuning that fails (memory, a compile) leaves the model's pick."""
    path = tile_table.table_path() if autotune.enabled() else None
    if path is None:
        return model
    import torch
    dev = a.device.index
    if ctas != sm_count(dev):
        return model
    k = autotune.key(torch.cuda.get_device_name(dev), ctas, M, N, K, dtype, kernel_digest(dtype))
    hit = autotune.lookup(k, Sm90Config)
    if hit is not None or autotune.failed(k):
        return hit or model
    with torch.cuda.device(dev):
        if torch.cuda.is_current_stream_capturing():  # nothing may be timed (or synchronized) here
            return model
        try:
            shortlist = tuning_candidates(path, M, N, K, ctas, model)
            torch.cuda.synchronize(dev)  # the operands may still be written on another stream
            ms = time_candidates(shortlist, dtype, a, b, ctas, model)
        except Exception as exc:  # noqa: BLE001 - the call itself can still run the model's pick
            autotune.mark_failed(k)
            warnings.warn(f"fo_lib.gemm.sm90: autotuning {M} x {N} x {K} failed ({type(exc).__name__}: {exc}); "
                          f"running the tile table's pick {config_label(model)}", RuntimeWarning, stacklevel=4)
            return model
    winner = tuning_pick(ms, shortlist, model, M, N, ctas)
    cfg = next(c for c in shortlist if config_label(c) == winner)
    autotune.remember(k, cfg, ms, config_label(model))
    return cfg


@dataclass(frozen=True, eq=False)
class TuningRun:
    """One config's timed calls: call ``i`` runs on operand set ``i % len(sets)`` into ``outs[i %
    len(sets)]`` (holding the sets and outputs keeps them alive: the launches hold raw pointers)."""
    launches: tuple
    sets: tuple
    outs: tuple

    def __call__(self, i: int) -> None:
        self.launches[i % len(self.launches)](None)


def tuning_runs(configs, dtype: str, a, b, ctas: int, reps: int = autotune.REPS) -> dict:
    """``{config_label: TuningRun}`` for :func:`fo_lib.gemm.autotune.time_launches` with ``reps`` calls
    per graph: the operand sets are the caller's ``a`` and ``b``, then copies of them, each with its
    own output (the caller's is not touched): :func:`~fo_lib.gemm.autotune.rotation_sets` of them as
    the benchmark allocates, but no more than the ``reps`` calls of one graph use (a graph's calls
    take sets 0, 1, ... in turn, as the benchmark's do; the configs share the sets and outputs)."""
    import torch
    M, N = a.shape[0], b.shape[0]
    l2 = torch.cuda.get_device_properties(a.device).L2_cache_size
    n = min(autotune.rotation_sets((a.numel() + b.numel() + M * N) * a.element_size(), l2), reps)
    sets = ((a, b),) + tuple((a.clone(), b.clone()) for _ in range(n - 1))
    outs = tuple(torch.empty(M, N, dtype=a.dtype, device=a.device) for _ in sets)
    return {config_label(c): TuningRun(tuple(SM90.prepare(c, dtype, "plain", x, y, o.data_ptr(), N, ctas)
                                             for (x, y), o in zip(sets, outs)), sets, outs)
            for c in configs}


def time_candidates(configs, dtype: str, a, b, ctas: int, model: Sm90Config, reps: int = autotune.REPS,
                    seed: int = 0, rounds: int = autotune.ROUNDS, settle_s: float | None = None) -> dict:
    """``{config_label: median ms per call}`` of ``configs`` on ``a`` and ``b`` as autotuning times
    them: :func:`fo_lib.gemm.autotune.time_launches` of :func:`tuning_runs`, ``reps`` calls per graph,
    ``rounds`` rounds, after :func:`tuning_settle_s` of idle (``model``: the tile table's pick, whose
    grid says one wave; ``settle_s``: seconds of idle instead, for experiments; None: the tuning's)."""
    if settle_s is None:
        settle_s = tuning_settle_s(model, a.shape[0], b.shape[0], ctas)
    return autotune.time_launches(tuning_runs(configs, dtype, a, b, ctas, reps), rounds=rounds, seed=seed, reps=reps,
                                  settle_s=settle_s)


def config_for(a, b, ctas: int | None = None) -> Sm90Config:
    """The config ``gemm_nt(a, b, ctas=ctas)`` runs (timing the shape's shortlist on ``a`` and ``b``
    on its first call, :mod:`fo_lib.gemm.autotune`)."""
    return _operands(a, b, None, ctas)[4]


def _sm90_operand_args(cfg, dtype, a, b, c_ptr, ldc):
    import numpy as np
    M, K = a.shape
    # Cluster 2: each CTA loads half of an A or B tile per TMA box (half of a shared one for both).
    return (operand_desc(a, cfg.BM // cfg.cluster, dtype), operand_desc(b, cfg.BN // cfg.cluster, dtype), np.uint64(c_ptr), np.int32(M),
            np.int32(b.shape[0]), np.int32(K), np.int64(ldc))


# The cost, in whole tiles, that the stream-K planner weighs a cooperative tile by whose second warpgroup has no rows
# (the last tile row, where M leaves at most 64 rows in it; that warpgroup walks the stages without MMAs). Alone such a
# tile costs less than a whole one on the H200, but runs weighed by what it costs ran behind the split tail there (they
# cut more tiles than they save), so the planner weighs it as a whole tile and the plan stays stream_k_plan's
# (probe_idle_warpgroup.py measures both; docs/perf-log.md has the numbers).
IDLE_WARPGROUP_TILE_COST = 1.0
# Runs of unequal length replace stream_k_plan's tail only where the busiest CTA saves this share of a
# tile (the plan's split tail starts every part together and cuts fewer tiles).
UNEQUAL_RUNS_MIN_GAIN = 0.05


def stream_k_schedule(cfg: Sm90Config, M: int, N: int, K: int, grid: int) -> tuple:
    """``(sk_tiles, split, bounds or None)`` of a launch of ``cfg`` on ``grid`` CTAs: no tail for a
    config without one, else :func:`stream_k_plan`'s; where the last tile row of a cooperative
    config costs :data:`IDLE_WARPGROUP_TILE_COST` (at most 64 rows of M in it), stream-K runs of
    unequal length (:func:`fo_lib.tiling.stream_k_weighted`) where they finish
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


# The same public calls as the portable family (fo_lib.gemm.family.GemmFamily). Probe stamps: start when the consumers
# begin the tile, end when its stores are done (when a signal would be sent). place_store=False: the store warps fetch a
# tile's row offsets while the consumers compute it, so the row table costs nothing measurable here, while tile places
# add per-store arithmetic to the three store warps (docs/perf-log.md, "Tile places").
SM90 = GemmFamily(_operands, generate_source, _sm90_operand_args, place_store=False, tail_args=_stream_k_args)
gemm_nt = SM90.gemm_nt
gemm_nt_signal = SM90.gemm_nt_signal
gemm_nt_scatter = SM90.gemm_nt_scatter
gemm_nt_probe = SM90.gemm_nt_probe


@contextmanager
def idle_warpgroup_tile_cost(cost: float):
    """Plan stream-K launches within the block as if a tile of an idle warpgroup cost ``cost`` (see
    :data:`IDLE_WARPGROUP_TILE_COST`), dropping memoized launches on the way in and out (their keys hold no plan)."""
    global IDLE_WARPGROUP_TILE_COST
    saved, IDLE_WARPGROUP_TILE_COST = IDLE_WARPGROUP_TILE_COST, cost
    SM90._memo.clear()
    try:
        yield
    finally:
        IDLE_WARPGROUP_TILE_COST = saved
        SM90._memo.clear()
