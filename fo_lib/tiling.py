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


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, got {value!r}")
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")


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
                f"{self.num_tiles} tiles, {self.ctas} CTAs -> {self.num_waves} wave{'s' if self.num_waves != 1 else ''}"
                f" (raster {self.order}, swizzle {self.swizzle}"
                + (", " + ", ".join(tail) if tail else "") + ")")
