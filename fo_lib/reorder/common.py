"""What every reorder unit shares: the table format, the NumPy reference reorders, tile -> group.

A table ``table[i, tn]`` (int64, ``[rows, tiles_n]``) is the buffer offset of element
``(i, tn * BN)``; the ``cols = min(BN, N - tn * BN)`` elements of that row inside tile column ``tn``
follow it contiguously (see :mod:`fo_lib.reorder` for the units built on it). Within a group tiles
are placed in schedule order (the order the GEMM finishes them).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import partition as part_mod
from ..tiling import TileGrid


class ReorderError(ValueError):
    """The reorder asked for cannot be built for these sizes / world / routing."""


def element_index(table: np.ndarray, N: int, BN: int) -> np.ndarray:
    """Buffer index of every element ``(i, j)`` of a ``[rows, N]`` matrix under ``table``."""
    j = np.arange(N)
    return table[:, j // BN] + (j % BN)


def pre_reorder(C: np.ndarray, table: np.ndarray, buffer_elements: int, BN: int,
                fill: float = np.nan) -> np.ndarray:
    """Scatter ``C`` into a fresh buffer as the signaled GEMM epilogue does (unused slots = ``fill``)."""
    buf = np.full(buffer_elements, fill, dtype=np.result_type(C.dtype, np.float32))
    buf[element_index(table, C.shape[1], BN)] = C
    return buf


def post_reorder(buf: np.ndarray, table: np.ndarray, N: int, BN: int) -> np.ndarray:
    """Gather a row-major ``[rows, N]`` matrix back out of ``buf`` (the post-reorder kernel)."""
    return buf[element_index(table, N, BN)]


def tile_groups(grid: TileGrid, partition) -> np.ndarray:
    """Group of each tile (row-major tile id) when waves are grouped by ``partition``."""
    part = part_mod.validate_partition(partition, grid.num_waves)
    return part_mod.group_of_wave(part)[grid.tile_wave].astype(np.int32)


def _slot_order(grid: TileGrid, tile_group: np.ndarray) -> np.ndarray:
    """Tile ids ordered by (group, schedule index): the order tiles are laid out in the buffer."""
    return np.lexsort((grid.schedule_index, tile_group))


def _row_coords(grid: TileGrid) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per (row, tile column): tile id, row inside the tile, and the tile's width, all [M, TN]."""
    i = np.arange(grid.M)[:, None]
    tn = np.arange(grid.tiles_n)[None, :]
    tile = (i // grid.BM) * grid.tiles_n + tn
    cols = np.broadcast_to(grid.tile_cols(tn), tile.shape)
    return tile, np.broadcast_to(i % grid.BM, tile.shape), cols, np.broadcast_to(i, tile.shape)


# A place's shift when a tile has no subtiles: row r is then at base + r * cols (r < 2^30).
WHOLE_TILE_SHIFT = 30


def _tile_places(grid: TileGrid, row_offset: np.ndarray, sub_rows: int, sub_stride) -> np.ndarray | None:
    """The GEMM's ``signal_tiles`` form of a row table whose tiles are stored as blocks: int64
    ``[tiles, 4]`` = ``(base, sub_stride, shift, 0)`` per row-major tile id, with row ``r`` of a tile
    at ``base + (r >> shift) * sub_stride + (r & (2^shift - 1)) * cols``. ``sub_rows`` rows per
    subtile (``BM``: whole tiles, any ``BM``); None where a subtile's rows are not a power of two.
    Checked against the table it replaces, element by element."""
    if sub_rows >= grid.BM:
        shift = WHOLE_TILE_SHIFT
    elif sub_rows <= 0 or sub_rows & (sub_rows - 1):
        return None
    else:
        shift = sub_rows.bit_length() - 1
    tm, tn = np.divmod(np.arange(grid.num_tiles), grid.tiles_n)
    places = np.zeros((grid.num_tiles, 4), dtype=np.int64)
    places[:, 0] = row_offset[tm * grid.BM, tn]
    places[:, 1] = sub_stride
    places[:, 2] = shift
    tile, r, cols, _ = _row_coords(grid)
    rebuilt = places[tile, 0] + (r >> shift) * places[tile, 1] + (r & ((1 << shift) - 1)) * cols
    if not np.array_equal(rebuilt, row_offset):
        raise ReorderError("tile places do not reproduce the row table (a layout that is not tile blocks)")
    return places


@dataclass(frozen=True)
class _GroupedTiles:
    """What every reorder unit shares: tile -> group, the per-group signal targets, and one
    interface the engine reads (:attr:`buffer_elements`, :attr:`recv_elements`, :meth:`post_table_for`)."""

    grid: TileGrid
    partition: tuple[int, ...]
    tile_group: np.ndarray      # int32 [tiles]
    group_tiles: np.ndarray     # int64 [groups]: tiles per group (the counting-table target per call)

    @property
    def num_groups(self) -> int:
        return len(self.partition)

    @property
    def buffer_elements(self) -> int:
        """Elements of the buffer the GEMM stores into (each unit sizes its own)."""
        raise NotImplementedError

    @property
    def recv_elements(self) -> int:
        """Elements of the receive buffer (0: the collective works in place on the send buffer)."""
        return 0

    def post_table_for(self, rank: int) -> np.ndarray:
        """The post-reorder's gather table on ``rank``: where each output row's tile-rows lie in the
        buffer the collective leaves its result in (every mode answers this one question)."""
        return self.post_table


def _grouped(grid: TileGrid, partition) -> _GroupedTiles:
    part = part_mod.validate_partition(partition, grid.num_waves)
    tg = tile_groups(grid, part)
    return _GroupedTiles(grid, part, tg, np.bincount(tg, minlength=len(part)).astype(np.int64))


def _check_world(world_size: int) -> None:
    if not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise ReorderError(f"world size must be a positive integer, got {world_size!r}")
