"""What both GEMM families' tile configs share, and the wave-count heuristic that picks one.

A config names a tile shape (a compiled specialization) plus a run-time raster (``order``,
``swizzle``). :func:`pick_by_waves` is DeepGEMM's kind of choice: among the configs that fit, the
lowest waves x padded tile area / full-tile throughput. Pure: no torch, no CuPy.
"""
from __future__ import annotations

import math

from .._util import ceil_div
from ..tiling import RASTER_ORDERS

DTYPES = ("bf16", "f16")
# The store modes of both kernel families (the calls choose one).
EPILOGUES = ("plain", "signal", "probe", "scatter", "signal_rows", "signal_tiles")
# The epilogue policy type (fo_lib/cuda/epilogue.cuh, namespace fo::epi) a kernel instantiation is
# compiled with, by store mode, one meaning in both families; "signal_store" is the portable
# kernel's one instantiation of both plain-layout signal stores (fo_lib.gemm.portable.portable_kernel).
EPILOGUE_POLICY = {"plain": "fo::epi::Plain", "signal": "fo::epi::Signal", "probe": "fo::epi::Probe",
                   "scatter": "fo::epi::Scatter", "signal_rows": "fo::epi::SignalRows",
                   "signal_tiles": "fo::epi::SignalTiles", "signal_store": "fo::epi::SignalStore"}
# The H100/H200 opt-in shared memory per block (232448 B); a device's own limit is checked at launch.
MAX_SMEM = 227 * 1024


class GemmError(ValueError):
    """A GEMM call or config that cannot run (bad dtype, shape, stride, table, ...)."""


class RasterMixin:
    """What every tile config (portable or Hopper) shares: ``BM``, ``BN``, ``order``, ``swizzle``."""

    # CTAs per cluster: the Hopper configs' field; every other config runs single CTAs.
    cluster = 1

    def grid(self, M: int, N: int, ctas: int):
        """The :class:`~fo_lib.tiling.TileGrid` (tiles, raster, waves) of ``M x N`` on ``ctas`` CTAs."""
        from ..tiling import TileGrid
        return TileGrid(M, N, self.BM, self.BN, order=self.order, swizzle=self.swizzle, _ctas=ctas)

    def launch_ctas(self, tiles: int, ctas: int) -> int:
        """The grid of ``tiles`` on up to ``ctas`` CTAs. NOTES: CTAs past the last tile would only
        exit; launching ``min(ctas, tiles)`` keeps the schedule (tile s -> CTA s % ctas) unchanged.
        A cluster's CTAs come in whole clusters (an odd tile count gets a phantom unit)."""
        return min(ctas, tiles + tiles % self.cluster)

    def for_ctas(self, ctas: int):
        """The config that runs on ``ctas`` CTAs: itself, or (a Hopper cluster config on a CTA count
        that is no whole number of clusters) the same tiles one CTA at a time."""
        from dataclasses import replace
        return self if ctas % self.cluster == 0 else replace(self, cluster=1)

    def with_raster(self, order: str | None = None, swizzle: int | None = None):
        """The same tiles walked in another raster order (a run-time argument: no recompile)."""
        from dataclasses import replace
        return replace(self, order=self.order if order is None else order,
                       swizzle=self.swizzle if swizzle is None else swizzle)

    @property
    def kernel_id(self) -> str:
        """Identifies the compiled kernel of this config (with the dtype and epilogue): its tile name,
        and where a config compiles in more than its tiles, a mark of that (the Hopper stream-K tail)."""
        return self.tile_name

    def whole_waves(self):
        """The same config without a stream-K tail (the Hopper configs' ``stream_k``): what runs where
        waves must stay whole (the overlap engine, the probe). Configs without the field are whole."""
        from dataclasses import replace
        return replace(self, stream_k=False) if getattr(self, "stream_k", False) else self

    def _check_fields(self, positive: tuple[str, ...], bad) -> None:
        """The checks both families' ``validate`` share: ``positive`` fields are positive ints and
        the raster order is known; ``bad(message)`` raises with the config's name."""
        for name in positive:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                bad(f"{name} must be a positive int, got {v!r}")
        if self.order not in RASTER_ORDERS:
            bad(f"order must be one of {RASTER_ORDERS}, got {self.order!r}")


def check_positive_ints(**values) -> None:
    """GemmError naming the first value that is not a positive int."""
    for name, v in values.items():
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise GemmError(f"{name} must be a positive int, got {v!r}")


def pick_by_waves(candidates: dict, tile_speed: dict, M: int, N: int, K: int, sm_count: int, smem_limit: int,
                  family: str = ""):
    """The wave-count model shared by both GEMM families: among ``candidates`` (name -> config) that
    fit ``smem_limit``, the lowest waves x padded tile area / ``tile_speed[name]``; a later candidate
    must win by 3 %. Returns it with a row raster in bands of up to 8 tile rows."""
    check_positive_ints(M=M, N=N, K=K, sm_count=sm_count, smem_limit=smem_limit)
    best, best_cost = None, math.inf
    for name, cfg in candidates.items():
        if cfg.smem_bytes > smem_limit:
            continue
        tiles = ceil_div(M, cfg.BM) * ceil_div(N, cfg.BN)
        # Tile work is spent on the padding past M/N (tails) too, so use the padded area.
        cost = ceil_div(tiles, sm_count) * cfg.BM * cfg.BN / tile_speed[name]
        if cost < best_cost * 0.97:
            best, best_cost = cfg, cost
    if best is None:
        raise GemmError(f"no {family + ' ' if family else ''}GEMM config fits {smem_limit} B of shared memory "
                        "per block")
    tiles_m = ceil_div(M, best.BM)
    tiles = tiles_m * ceil_div(N, best.BN)
    swizzle = 1 if tiles <= sm_count else min(8, tiles_m)
    return best.with_raster("row", swizzle)
