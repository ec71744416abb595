"""Tile grid, raster order and the tile -> wave model of one GEMM launch.

The output ``C[M, N]`` is cut into ``BM x BN`` tiles. ``tile_id = tm * TN + tn`` is the row-major
tile index (the one every table in :mod:`fo_lib.reorder` is keyed by). The *schedule index* ``s`` is
the order in which a persistent kernel hands tiles out: CTA ``b`` of ``P`` runs ``s = b, b + P, ...``,
so tile ``s`` starts in wave ``s // P`` and the GEMM has ``T = ceil(tiles / P)`` waves.

Raster orders (``fo_lib/cuda/tile_schedule.cuh`` implements the same function; a test checks both):

* ``order="row"``: bands of ``swizzle`` tile rows; inside a band the walk goes column by column and,
  inside a column, down the band's rows. ``swizzle=1`` is plain row-major (N fastest).
* ``order="col"``: the transpose: bands of ``swizzle`` tile columns, walked row by row.
  ``swizzle=1`` is column-major (M fastest), the CUTLASS identity raster the paper's code uses.

A band at the edge of the grid may have fewer than ``swizzle`` rows (columns); the walk then uses
the rows that exist, so every tile is visited exactly once for any grid and swizzle.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ._util import ceil_div

RASTER_ORDERS = ("row", "col")
# NOTES: a stream-K tail adds a workspace round trip per cut tile and a wait for its other part; it
# is used only where the partial last wave idles at least this share of the GEMM's CTA time.
STREAM_K_MIN_IDLE = 0.05


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, got {value!r}")
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")


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


def raster_tile(s: np.ndarray | int, tiles_m: int, tiles_n: int, order: str = "row",
                swizzle: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Map schedule indices ``s`` to tile coordinates ``(tm, tn)`` (vectorised over ``s``)."""
    if order not in RASTER_ORDERS:
        raise ValueError(f"raster order must be one of {RASTER_ORDERS}, got {order!r}")
    _check_positive(tiles_m=tiles_m, tiles_n=tiles_n, swizzle=swizzle)
    s = np.asarray(s, dtype=np.int64)
    # "col" is "row" on the transposed grid.
    major, minor = (tiles_m, tiles_n) if order == "row" else (tiles_n, tiles_m)
    band = s // (swizzle * minor)
    in_band = s - band * swizzle * minor
    band_width = np.minimum(swizzle, major - band * swizzle)
    a = band * swizzle + in_band % band_width
    b = in_band // band_width
    return (a, b) if order == "row" else (b, a)


@dataclass(frozen=True)
class TileGrid:
    """The tiles of ``C[M, N]`` for one tile shape and raster, and how they fall into waves.

    ``ctas`` is the number of persistent CTAs the GEMM launches: ``(sm_count - comm_sms) *
    ctas_per_sm`` unless given explicitly.
    """

    M: int
    N: int
    BM: int = 128
    BN: int = 128
    order: str = "row"
    swizzle: int = 1
    sm_count: int = 132
    comm_sms: int = 0
    ctas_per_sm: int = 1
    K: int | None = None
    _ctas: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _check_positive(M=self.M, N=self.N, BM=self.BM, BN=self.BN, swizzle=self.swizzle,
                        sm_count=self.sm_count, ctas_per_sm=self.ctas_per_sm)
        if self.K is not None:
            _check_positive(K=self.K)
        if self.order not in RASTER_ORDERS:
            raise ValueError(f"raster order must be one of {RASTER_ORDERS}, got {self.order!r}")
        if not 0 <= self.comm_sms < self.sm_count:
            raise ValueError(f"comm_sms must be in [0, sm_count={self.sm_count}), got {self.comm_sms}:"
                             " communication cannot take every SM")
        if self.BM % 16 or self.BN % 8:
            raise ValueError(f"tile {self.BM}x{self.BN} is impossible: BM must be a multiple of 16, BN of 8")
        if self._ctas is not None:
            _check_positive(ctas=self._ctas)

    @classmethod
    def with_ctas(cls, M: int, N: int, ctas: int, **kw) -> "TileGrid":
        """A grid whose persistent CTA count is given directly (e.g. read off a launch)."""
        return cls(M, N, _ctas=ctas, **kw)

    # --- sizes -------------------------------------------------------------------------------
    @property
    def tiles_m(self) -> int:
        return ceil_div(self.M, self.BM)

    @property
    def tiles_n(self) -> int:
        return ceil_div(self.N, self.BN)

    @property
    def num_tiles(self) -> int:
        return self.tiles_m * self.tiles_n

    @property
    def ctas(self) -> int:
        """Concurrent (persistent) CTAs: the number of tiles in one wave."""
        if self._ctas is not None:
            return self._ctas
        return (self.sm_count - self.comm_sms) * self.ctas_per_sm

    @property
    def num_waves(self) -> int:
        return ceil_div(self.num_tiles, self.ctas)

    @property
    def has_tail_m(self) -> bool:
        return self.M % self.BM != 0

    @property
    def has_tail_n(self) -> bool:
        return self.N % self.BN != 0

    # --- orders ------------------------------------------------------------------------------
    @cached_property
    def schedule(self) -> np.ndarray:
        """``schedule[s]`` = row-major tile id run at schedule index ``s``."""
        tm, tn = raster_tile(np.arange(self.num_tiles), self.tiles_m, self.tiles_n,
                             self.order, self.swizzle)
        return (tm * self.tiles_n + tn).astype(np.int64)

    @cached_property
    def schedule_index(self) -> np.ndarray:
        """Inverse of :attr:`schedule`: ``schedule_index[tile_id] = s``."""
        inv = np.empty(self.num_tiles, dtype=np.int64)
        inv[self.schedule] = np.arange(self.num_tiles)
        return inv

    @cached_property
    def tile_wave(self) -> np.ndarray:
        """Wave of each tile (indexed by row-major tile id)."""
        return self.schedule_index // self.ctas

    def wave_tiles(self, wave: int) -> np.ndarray:
        """Row-major tile ids of one wave, in schedule order."""
        if not 0 <= wave < self.num_waves:
            raise IndexError(f"wave {wave} out of range [0, {self.num_waves})")
        return self.schedule[wave * self.ctas:(wave + 1) * self.ctas]

    @property
    def tiles_per_wave(self) -> np.ndarray:
        """Tiles in each wave; only the last wave can be short."""
        counts = np.full(self.num_waves, self.ctas, dtype=np.int64)
        counts[-1] = self.num_tiles - self.ctas * (self.num_waves - 1)
        return counts

    # --- tile geometry -----------------------------------------------------------------------
    def tile_rows(self, tile_id: np.ndarray | int) -> np.ndarray:
        """Rows of a tile (``BM`` except in the last tile row when M has a tail)."""
        tm = np.asarray(tile_id) // self.tiles_n
        return np.minimum(self.BM, self.M - tm * self.BM)

    def tile_cols(self, tile_id: np.ndarray | int) -> np.ndarray:
        tn = np.asarray(tile_id) % self.tiles_n
        return np.minimum(self.BN, self.N - tn * self.BN)

    def tile_elements(self) -> np.ndarray:
        """Elements of each tile, indexed by row-major tile id."""
        ids = np.arange(self.num_tiles)
        return (self.tile_rows(ids) * self.tile_cols(ids)).astype(np.int64)

    def wave_elements(self) -> np.ndarray:
        """Output elements produced by each wave (what a group of waves would communicate)."""
        return np.bincount(self.tile_wave, weights=self.tile_elements(),
                           minlength=self.num_waves).astype(np.int64)

    def describe(self) -> str:
        tail = []
        if self.has_tail_m:
            tail.append(f"M tail {self.M % self.BM}")
        if self.has_tail_n:
            tail.append(f"N tail {self.N % self.BN}")
        return (f"{self.M}x{self.N} in {self.BM}x{self.BN} tiles: {self.tiles_m}x{self.tiles_n} = "
                f"{self.num_tiles} tiles, {self.ctas} CTAs -> {self.num_waves} waves"
                f" (raster {self.order}, swizzle {self.swizzle}"
                + (", " + ", ".join(tail) if tail else "") + ")")
