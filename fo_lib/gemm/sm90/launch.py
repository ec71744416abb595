"""The Hopper GEMM's launches: the public calls (:data:`SM90`, a :class:`fo_lib.gemm.family.GemmFamily`:
``gemm_nt``, ``gemm_nt_signal``, ``gemm_nt_scatter``, ``gemm_nt_probe``), the operand checks, the
TMA operand arguments, and the config a plain call runs: the tile table's pick or, where autotuning
applies, the fastest of its shortlist timed on the call's operands (:func:`config_for`; what is
timed and how it is weighed: :mod:`fo_lib.gemm.sm90.config_tuning`). The timing lives here, beside
the family it launches through, since a plain call of the family is what asks for it.

torch, CuPy and cuda-bindings are imported at launch.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass

from ..._util import sm_count
from .. import config_tuning, tile_table
from ..checks import check_operands
from ..config import GemmError
from ..family import GemmFamily
from ..tma import driver, operand_desc
from . import stream_k_tail
from .config_tuning import (kernel_digest, shortlist_digest, table_free_candidates, tuning_candidates,
                            tuning_pick, tuning_settle_s)
from .configs import Sm90Config, config_label
from .pick import default_config
from .source import generate_source
from .stream_k_tail import _stream_k_args


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


def config_for(a, b, ctas: int | None = None) -> Sm90Config:
    """The config ``gemm_nt(a, b, ctas=ctas)`` runs (timing the shape's shortlist on ``a`` and ``b``
    on its first call, :mod:`fo_lib.gemm.config_tuning`)."""
    return _operands(a, b, None, ctas)[4]


def _sm90_operand_args(cfg, dtype, a, b, c_ptr, ldc):
    import numpy as np
    M, K = a.shape
    # Cluster 2: each CTA loads half of an A or B tile per TMA box (half of a shared one for both).
    return (operand_desc(a, cfg.BM // cfg.cluster, dtype), operand_desc(b, cfg.BN // cfg.cluster, dtype), np.uint64(c_ptr), np.int32(M),
            np.int32(b.shape[0]), np.int32(K), np.int64(ldc))


def _tuned(a, b, dtype, M, N, K, ctas, model: Sm90Config) -> Sm90Config:
    """The config a plain call runs: the picker's ``model``, or where autotuning applies
    (:mod:`fo_lib.gemm.config_tuning`: on, the SM count's CTAs) the fastest of a shortlist, timed on
    these operands on the shape's first call outside a CUDA-graph capture and remembered on disk:
    with a tile table, the table's ranking; without one, the guess beside a fixed set of other tiles
    (:func:`fo_lib.gemm.sm90.config_tuning.table_free_candidates`). A tuning that fails (memory, a
    compile) leaves the model's pick."""
    if not config_tuning.enabled():
        return model
    path = tile_table.table_path()
    import torch
    dev = a.device.index
    if ctas != sm_count(dev):
        return model
    # A tuning weighed the shortlist of one table (or of none): another table, a re-recorded one
    # or a new table-free list tunes again.
    k = config_tuning.key(torch.cuda.get_device_name(dev), ctas, M, N, K, dtype,
                          kernel_digest(dtype) + "-" + shortlist_digest(path))
    hit = config_tuning.lookup(k, Sm90Config)
    if hit is not None or config_tuning.failed(k):
        return hit or model
    with torch.cuda.device(dev):
        if torch.cuda.is_current_stream_capturing():  # nothing may be timed (or synchronized) here
            return model
        try:
            shortlist = (tuning_candidates(path, M, N, K, ctas, model) if path
                         else table_free_candidates(M, N, K, ctas, model))
            torch.cuda.synchronize(dev)  # the operands may still be written on another stream
            ms = time_candidates(shortlist, dtype, a, b, ctas, model)
        except Exception as exc:  # noqa: BLE001 - the call itself can still run the model's pick
            config_tuning.mark_failed(k)
            warnings.warn(f"fo_lib.gemm.sm90: autotuning {M} x {N} x {K} failed ({type(exc).__name__}: {exc}); "
                          f"running the picker's {config_label(model)}", RuntimeWarning, stacklevel=4)
            return model
    winner = tuning_pick(ms, shortlist, model, M, N, ctas)
    cfg = next(c for c in shortlist if config_label(c) == winner)
    config_tuning.remember(k, cfg, ms, config_label(model))
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


def tuning_runs(configs, dtype: str, a, b, ctas: int, reps: int = config_tuning.REPS) -> dict:
    """``{config_label: TuningRun}`` for :func:`fo_lib.gemm.config_tuning.time_launches` with ``reps``
    calls per graph: the operand sets are the caller's ``a`` and ``b``, then copies of them, each with
    its own output (the caller's is not touched): :func:`~fo_lib.gemm.config_tuning.rotation_sets` of
    them as the benchmark allocates, but no more than the ``reps`` calls of one graph use (a graph's calls
    take sets 0, 1, ... in turn, as the benchmark's do; the configs share the sets and outputs)."""
    import torch
    M, N = a.shape[0], b.shape[0]
    l2 = torch.cuda.get_device_properties(a.device).L2_cache_size
    n = min(config_tuning.rotation_sets((a.numel() + b.numel() + M * N) * a.element_size(), l2), reps)
    sets = ((a, b),) + tuple((a.clone(), b.clone()) for _ in range(n - 1))
    outs = tuple(torch.empty(M, N, dtype=a.dtype, device=a.device) for _ in sets)
    return {config_label(c): TuningRun(tuple(SM90.prepare(c, dtype, "plain", x, y, o.data_ptr(), N, ctas)
                                             for (x, y), o in zip(sets, outs)), sets, outs)
            for c in configs}


def time_candidates(configs, dtype: str, a, b, ctas: int, model: Sm90Config, reps: int = config_tuning.REPS,
                    seed: int = 0, rounds: int = config_tuning.ROUNDS, settle_s: float | None = None) -> dict:
    """``{config_label: median ms per call}`` of ``configs`` on ``a`` and ``b`` as autotuning times
    them: :func:`fo_lib.gemm.config_tuning.time_launches` of :func:`tuning_runs`, ``reps`` calls per
    graph, ``rounds`` rounds, after :func:`~fo_lib.gemm.sm90.config_tuning.tuning_settle_s` of idle (``model``: the tile table's pick, whose
    grid says one wave; ``settle_s``: seconds of idle instead, for experiments; None: the tuning's)."""
    if settle_s is None:
        settle_s = tuning_settle_s(model, a.shape[0], b.shape[0], ctas)
    return config_tuning.time_launches(tuning_runs(configs, dtype, a, b, ctas, reps), rounds=rounds, seed=seed,
                                       reps=reps, settle_s=settle_s)


# The same public calls as the portable family (fo_lib.gemm.family.GemmFamily). Probe stamps: start when the consumers
# begin the tile, end when its stores are done (when a signal would be sent). place_store=False: the store warps fetch a
# tile's row offsets while the consumers compute it, so the row table costs nothing measurable here, while tile places
# add per-store arithmetic to the three store warps (docs/decisions.md, "Tile places on the portable kernel, the row
# table on the Hopper kernel").
SM90 = GemmFamily(_operands, generate_source, _sm90_operand_args, place_store=False, tail_args=_stream_k_args)
gemm_nt = SM90.gemm_nt
gemm_nt_signal = SM90.gemm_nt_signal
gemm_nt_scatter = SM90.gemm_nt_scatter
gemm_nt_probe = SM90.gemm_nt_probe


@contextmanager
def idle_warpgroup_tile_cost(cost: float):
    """Plan stream-K launches within the block as if a tile of an idle warpgroup cost ``cost`` (see
    :data:`fo_lib.gemm.sm90.stream_k_tail.IDLE_WARPGROUP_TILE_COST`, set there for the block),
    dropping memoized launches on the way in and out (their keys hold no plan)."""
    saved, stream_k_tail.IDLE_WARPGROUP_TILE_COST = stream_k_tail.IDLE_WARPGROUP_TILE_COST, cost
    SM90._memo.clear()
    try:
        yield
    finally:
        stream_k_tail.IDLE_WARPGROUP_TILE_COST = saved
        SM90._memo.clear()
