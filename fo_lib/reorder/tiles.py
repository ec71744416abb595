"""AllReduce reorders: whole tiles per group (:func:`tile_reorder`), whole tile-row bands in the
natural layout (:func:`row_reorder`), and one copy per rank for an AllGather whose sum is the
post-reorder's (:func:`gather_reorder`)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .. import partition as part_mod
from ..tiling import TileGrid
from .common import ReorderError, _check_world, _grouped, _GroupedTiles, _row_coords, _slot_order, _tile_places


@dataclass(frozen=True)
class TileReorder(_GroupedTiles):
    row_offset: np.ndarray      # int64 [M, TN]: GEMM store table (and post-reorder gather table)
    group_slices: np.ndarray    # int64 [groups, 2]: [start, stop) of each group's slice

    @property
    def buffer_elements(self) -> int:
        return self.grid.M * self.grid.N

    @property
    def post_table(self) -> np.ndarray:
        """AllReduce is in place: the gather table is the store table."""
        return self.row_offset

    @cached_property
    def tile_place(self) -> np.ndarray | None:
        """The store table as one place per tile (:func:`_tile_places`; the GEMM's ``signal_tiles``
        epilogue reads it instead of a row offset per row)."""
        return _tile_places(self.grid, self.row_offset, self.grid.BM, 0)


def tile_reorder(grid: TileGrid, partition) -> TileReorder:
    g = _grouped(grid, partition)
    order = _slot_order(grid, g.tile_group)
    sizes = grid.tile_elements()
    offset = np.empty(grid.num_tiles, dtype=np.int64)
    offset[order] = np.concatenate(([0], np.cumsum(sizes[order])[:-1]))
    tile, r, cols, _ = _row_coords(grid)
    row_offset = offset[tile] + r * cols
    ends = np.cumsum(np.bincount(g.tile_group, weights=sizes, minlength=g.num_groups)).astype(np.int64)
    slices = np.stack([np.concatenate(([0], ends[:-1])), ends], axis=1)
    return TileReorder(grid, g.partition, g.tile_group, g.group_tiles,
                       np.ascontiguousarray(row_offset, dtype=np.int64), slices)


# --- AllReduce: row bands, the natural layout -------------------------------------------------------
@dataclass(frozen=True)
class RowReorder(TileReorder):
    """Groups of whole tile-row bands, stored in the natural row-major layout (see the module doc):
    an AllReduce reorder whose table is the identity.

    ``partition`` is the wave partition asked for; ``row_cuts`` the output rows where groups start
    and end (``[groups + 1]``, from 0 to M): group ``g`` is rows ``row_cuts[g]:row_cuts[g + 1]``.
    A wave cut that falls inside a band moves down to the band's start, so the band's tiles join the
    next group; cuts that meet merge (fewer groups than ``partition`` then)."""

    row_cuts: np.ndarray        # int64 [groups + 1]

    @property
    def num_groups(self) -> int:
        return len(self.group_tiles)

    @property
    def tile_place(self) -> None:
        """None: C is stored row-major (the GEMM's ``signal_rows``), not in tile blocks."""
        return None


def band_tiles(grid: TileGrid) -> int:
    """Schedule indices per band of a row raster: ``swizzle`` tile rows (fewer in the last band)."""
    if grid.order != "row":
        raise ReorderError(f"the rows layout needs a row raster (bands of whole tile rows), got order {grid.order!r}")
    return min(grid.swizzle, grid.tiles_m) * grid.tiles_n


def row_reorder(grid: TileGrid, partition) -> RowReorder:
    part = part_mod.validate_partition(partition, grid.num_waves)
    band = band_tiles(grid)
    # Wave cuts in schedule indices, moved down to a band start; 0 and the end bound the groups.
    wave_cuts = part_mod.boundaries(part)[1:-1] * grid.ctas
    cuts = np.unique(np.concatenate(([0], (wave_cuts // band) * band, [grid.num_tiles])))
    group_of_s = np.searchsorted(cuts, np.arange(grid.num_tiles), side="right") - 1
    tile_group = np.empty(grid.num_tiles, dtype=np.int32)
    tile_group[grid.schedule] = group_of_s
    group_tiles = np.diff(cuts).astype(np.int64)
    # A cut at band start c begins output row (c / band) * rows_per_band * BM; the last cut is M.
    rows_per_band = min(grid.swizzle, grid.tiles_m)
    row_cuts = np.where(cuts == grid.num_tiles, grid.M, (cuts // band) * rows_per_band * grid.BM).astype(np.int64)
    i = np.arange(grid.M, dtype=np.int64)[:, None]
    row_offset = i * grid.N + np.arange(grid.tiles_n, dtype=np.int64)[None, :] * grid.BN
    slices = np.stack([row_cuts[:-1], row_cuts[1:]], axis=1) * grid.N
    return RowReorder(grid, part, tile_group, group_tiles, np.ascontiguousarray(row_offset), slices, row_cuts)


# --- AllReduce as AllGather + sum: tile unit, one copy per rank ---------------------------------
@dataclass(frozen=True)
class GatherReorder(_GroupedTiles):
    """An AllReduce whose collective is an in-place AllGather per group and whose sum is the
    post-reorder's: the tile layout of :func:`tile_reorder`, with each group's slice (``L`` elements)
    widened to ``W`` copies, one per rank, back to back. Rank ``k`` stores its tiles into copy ``k``
    (``row_offset``: this rank's store table), the AllGather fills the other copies, and the
    post-reorder sums copy ``s`` at ``post_table + s * peer_stride`` over ``s < W``.

    On 2 ranks the AllGather moves as many bytes over the link as an AllReduce, and NCCL can run it
    on the copy engines (no SM); for ``W`` ranks it moves ``W / 2`` times as many."""

    world_size: int
    rank: int
    row_offset: np.ndarray      # int64 [M, TN]: this rank's GEMM store table
    group_slices: np.ndarray    # int64 [groups, 2]: each group's W copies (the AllGather's receive span)
    own_slices: np.ndarray      # int64 [groups, 2]: this rank's copy in each (the AllGather's send span)
    post_table: np.ndarray      # int64 [M, TN]: copy 0 of every entry
    peer_stride: np.ndarray     # int64 [M, TN]: elements from one copy to the next (the group's length)

    @property
    def buffer_elements(self) -> int:
        return self.world_size * self.grid.M * self.grid.N

    @cached_property
    def tile_place(self) -> np.ndarray | None:
        """The store table as one place per tile (see :attr:`TileReorder.tile_place`)."""
        return _tile_places(self.grid, self.row_offset, self.grid.BM, 0)


def gather_reorder(grid: TileGrid, partition, world_size: int, rank: int) -> GatherReorder:
    _check_world(world_size)
    if not 0 <= rank < world_size:
        raise ReorderError(f"rank {rank} outside a world of {world_size}")
    base = tile_reorder(grid, partition)
    W = int(world_size)
    start, stop = base.group_slices[:, 0], base.group_slices[:, 1]
    length = stop - start
    tile, _, _, _ = _row_coords(grid)
    group = base.tile_group[tile]  # group of every (row, tile column) entry
    post = base.row_offset + (W - 1) * start[group]  # a group's copies start at W * start
    stride = np.ascontiguousarray(length[group], dtype=np.int64)
    own = np.stack([W * start + rank * length, W * start + (rank + 1) * length], axis=1)
    return GatherReorder(grid, base.partition, base.tile_group, base.group_tiles, W, int(rank),
                         np.ascontiguousarray(post + rank * stride), np.stack([W * start, W * stop], axis=1),
                         own, np.ascontiguousarray(post), stride)
