"""Stream-K planning of a persistent GEMM launch: how many of the last tiles are shared by every
CTA, and how (equal runs of k-blocks, a split tail of equal k ranges, or runs of unequal length where
tiles cost unequal time). The Hopper GEMM's stream-K tail (:mod:`fo_lib.gemm.sm90.stream_k_tail`) runs
these plans; the tile table's wave model (:mod:`fo_lib.gemm.tile_table`) prices them.

Pure: NumPy only, no torch, no CuPy.
"""
from __future__ import annotations

import numpy as np

from .._util import ceil_div
from ..tiling import _check_positive, raster_tile

# NOTES: a stream-K tail adds a workspace round trip per cut tile and a wait for its other part; it
# is used only where the partial last wave idles at least this share of the GEMM's CTA time.
STREAM_K_MIN_IDLE = 0.05


def stream_k_tiles(tiles: int, ctas: int) -> int:
    """How many of the last tiles a stream-K launch of ``tiles`` tiles on ``ctas`` persistent CTAs
    spreads over every CTA as equal runs of k-blocks (the Hopper GEMM's ``stream_k``): the partial
    last wave plus one full wave (each CTA then runs between one and two tiles' worth of k-blocks,
    so a tile is cut between at most two CTAs), or 0 where the last wave is full, there is a single
    wave, or the last wave idles less than :data:`STREAM_K_MIN_IDLE` of the CTA time.

    >>> stream_k_tiles(336, 132), stream_k_tiles(264, 132), stream_k_tiles(900, 132)
    (204, 0, 0)
    """
    _check_positive(tiles=tiles, ctas=ctas)
    tail = tiles % ctas
    if tiles <= ctas or tail == 0:
        return 0
    idle = (ctas - tail) / (ceil_div(tiles, ctas) * ctas)
    return tail + ctas if idle >= STREAM_K_MIN_IDLE else 0


# The split tail (stream_k_plan): at most this many parts per tile (the finishing CTA reads the others'
# fp32 parts back), each at least this many k-blocks long.
STREAM_K_MAX_SPLIT = 4
STREAM_K_MIN_PART_KBLOCKS = 4


def stream_k_plan(tiles: int, ctas: int, k_blocks: int) -> tuple[int, int]:
    """How a stream-K launch of ``tiles`` tiles of ``k_blocks`` k-blocks on ``ctas`` persistent CTAs
    shares its partial last wave: ``(sk_tiles, split)``.

    * ``split >= 2`` (the split tail): the ``sk_tiles`` tiles of the partial last wave are each cut
      into ``split`` equal k ranges, one per CTA (``sk_tiles * split <= ctas``), every part of a tile
      starting at the same moment; the CTA with the last range sums the others. Where the tail has at
      most half as many tiles as there are CTAs (and K gives parts of
      :data:`STREAM_K_MIN_PART_KBLOCKS` k-blocks): the last wave then costs ``1 / split`` of a tile.
    * ``split == 1`` (runs): :func:`stream_k_tiles` tiles, the partial wave and one full wave, spread
      over every CTA as equal runs of k-blocks.
    * ``(0, 0)``: whole waves (see :func:`stream_k_tiles`).

    >>> stream_k_plan(448, 132, 80), stream_k_plan(336, 132, 224), stream_k_plan(264, 132, 64)
    ((52, 2), (204, 1), (0, 0))
    """
    _check_positive(tiles=tiles, ctas=ctas, k_blocks=k_blocks)
    sk = stream_k_tiles(tiles, ctas)
    if sk == 0:
        return 0, 0
    tail = tiles % ctas
    split = min(STREAM_K_MAX_SPLIT, ctas // tail, k_blocks // STREAM_K_MIN_PART_KBLOCKS)
    return (tail, split) if split >= 2 else (sk, 1)


def stream_k_weighted(tiles: int, ctas: int, k_blocks: int, cost) -> tuple[int, np.ndarray, float] | None:
    """Stream-K runs of unequal length, for tiles of unequal cost (``cost[s]``: schedule index
    ``s``'s time in whole tiles, at most 1): the last :func:`stream_k_tiles` tiles as one run of
    k-blocks cut at ``bounds`` (CTA ``b`` runs ``[bounds[b], bounds[b + 1])``), so that each CTA's
    whole tiles before them (``s = b, b + ctas, ...``) and its run cost the same. Returns
    ``(sk_tiles, bounds (int64, ctas + 1), that cost in tiles)``, or None where no tail pays or a run
    would be shorter than a tile (the kernel cuts a tile between at most two CTAs).

    >>> sk, bounds, t = stream_k_weighted(5, 2, 4, [1, 1, 1, 1, 0.5])
    >>> sk, bounds.tolist(), t
    (3, [0, 5, 12], 2.25)
    """
    _check_positive(tiles=tiles, ctas=ctas, k_blocks=k_blocks)
    sk = stream_k_tiles(tiles, ctas)
    cost = np.asarray(cost, dtype=float)
    if sk == 0 or cost.shape != (tiles,) or not ((cost > 0) & (cost <= 1)).all():
        return None
    dp = tiles - sk
    whole = np.bincount(np.arange(dp) % ctas, weights=cost[:dp], minlength=ctas).astype(float)
    run = cost[dp:]
    finish = (whole.sum() + run.sum()) / ctas
    starts = np.concatenate(([0.0], np.cumsum(run)))  # the run's cost where each of its tiles begins
    want = np.concatenate(([0.0], np.cumsum(finish - whole)))  # where each CTA's run begins
    t = np.clip(np.searchsorted(starts, want, side="right") - 1, 0, sk - 1)
    bounds = t * k_blocks + np.rint((want - starts[t]) / run[t] * k_blocks)
    bounds[0], bounds[-1] = 0, sk * k_blocks
    bounds = bounds.astype(np.int64)
    if (np.diff(bounds) < k_blocks).any():
        return None
    return sk, bounds, float(finish)


def last_row_costs(tiles_m: int, tiles_n: int, order: str, swizzle: int, cost: float) -> np.ndarray:
    """Each schedule index's cost in whole tiles where the last tile row's tiles cost ``cost``."""
    tm, _ = raster_tile(np.arange(tiles_m * tiles_n), tiles_m, tiles_n, order, swizzle)
    return np.where(tm == tiles_m - 1, cost, 1.0)


def stream_k_finish(tiles: int, ctas: int, k_blocks: int, cost, sk: int, split: int) -> float:
    """The busiest CTA's cost in whole tiles under :func:`stream_k_plan`'s ``(sk, split)``: its whole
    tiles plus its k range of a split tail tile, or plus its equal run (``split`` 1)."""
    cost = np.asarray(cost, dtype=float)
    dp = tiles - sk
    per = np.bincount(np.arange(dp) % ctas, weights=cost[:dp], minlength=ctas).astype(float)
    if split >= 2:
        per[:sk * split] += np.tile(cost[dp:], split) / split
    elif sk:
        kcost = np.repeat(cost[dp:], k_blocks) / k_blocks  # each k-block of the run
        edges = np.concatenate(([0], np.cumsum(kcost)))
        b = np.arange(ctas + 1) * (sk * k_blocks) // ctas
        per += np.diff(edges[b])
    return float(per.max())
