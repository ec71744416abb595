"""Mapping tables of the pre- and post-communication reorders, with NumPy reference kernels.

Every table here has one format, the one the GEMM epilogue and the post-reorder kernel read:
``table[i, tn]`` (int64, shape ``[rows, tiles_n]``) is the buffer offset of element
``(i, tn * BN)``; the ``cols = min(BN, N - tn * BN)`` elements of that row inside tile column ``tn``
follow it contiguously. One indirection per (row, tile column) expresses all three units:

* **tile** (AllReduce, :func:`tile_reorder`): the tiles of a group are stored one after another
  (each tile row-major, in schedule order), so each group's slice is contiguous and the whole
  buffer is exactly ``M * N`` elements.
* **rows** (AllReduce, :func:`row_reorder`): no reorder at all. When every group is a run of whole
  tile-row bands of a row raster, its rows are already contiguous in the row-major output, so the
  GEMM stores ``C`` in place and each group's collective works on a row range: no table read in the
  GEMM and, without fused element-wise work, no post-reorder. The wave groups' cuts move down to
  the nearest band boundary (a group never waits for a later wave than its partition says).
* **subtile** (ReduceScatter, :func:`subtile_reorder`): each tile's rows are cut into ``W``
  subtiles of ``BM / W`` rows; a group's slice holds ``W`` equal chunks, chunk ``k`` being subtile
  ``k`` of every tile in the group, so one ``ReduceScatter`` per group delivers chunk ``k`` to rank
  ``k``. Rank ``k`` owns the block-cyclic rows ``{i : (i % BM) // (BM / W) == k}``.
* **subtoken** (All-to-All, :func:`subtoken_reorder`): inside a group the rows are sorted by
  destination rank, so the rows for one destination are contiguous; counts per (group, destination)
  drive one grouped send/recv per group, and the receiver gathers rows back by a table.

Within a group tiles are placed in schedule order (the order the GEMM finishes them).

Modules: :mod:`.common` (table format, NumPy reference reorders, the shared base), :mod:`.tiles`
(AllReduce), :mod:`.subtiles` (ReduceScatter), :mod:`.subtokens` (All-to-All). Pure: NumPy only.
"""
from .common import (WHOLE_TILE_SHIFT, ReorderError, _check_world, _grouped, _GroupedTiles, _row_coords,  # noqa: F401
                     _slot_order, _tile_places, element_index, post_reorder, pre_reorder, tile_groups)
from .subtiles import SubtileReorder, owned_rows, subtile_reorder
from .subtokens import SubtokenReorder, _check_routing, _subtoken_send_layout, subtoken_reorder  # noqa: F401
from .tiles import GatherReorder, RowReorder, TileReorder, band_tiles, gather_reorder, row_reorder, tile_reorder

__all__ = [
    "ReorderError", "element_index", "pre_reorder", "post_reorder", "tile_groups", "WHOLE_TILE_SHIFT",
    "TileReorder", "tile_reorder", "RowReorder", "row_reorder", "band_tiles", "GatherReorder", "gather_reorder",
    "SubtileReorder", "subtile_reorder", "owned_rows", "SubtokenReorder", "subtoken_reorder",
]
