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
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import partition as part_mod
from .tiling import TileGrid


class ReorderError(ValueError):
    """The reorder asked for cannot be built for these sizes / world / routing."""


# --- generic table helpers (the NumPy reference of the kernels) -------------------------------
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
    """What every reorder mode shares: tile -> group and the per-group signal targets."""

    grid: TileGrid
    partition: tuple[int, ...]
    tile_group: np.ndarray      # int32 [tiles]
    group_tiles: np.ndarray     # int64 [groups]: tiles per group (the counting-table target per call)

    @property
    def num_groups(self) -> int:
        return len(self.partition)

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


# --- AllReduce: tile unit ----------------------------------------------------------------------
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


# --- ReduceScatter: subtile unit ---------------------------------------------------------------
def _check_world(world_size: int) -> None:
    if not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise ReorderError(f"world size must be a positive integer, got {world_size!r}")


def owned_rows(M: int, BM: int, world_size: int, rank: int) -> np.ndarray:
    """Rows rank ``rank`` holds after the subtile ReduceScatter (ascending, block-cyclic)."""
    _check_world(world_size)
    if BM % world_size:
        raise ReorderError(f"tile height BM={BM} must be divisible by the world size {world_size} "
                           f"(each tile is cut into {world_size} subtiles along its rows)")
    if not 0 <= rank < world_size:
        raise ReorderError(f"rank {rank} out of range for world size {world_size}")
    i = np.arange(M)
    return i[(i % BM) // (BM // world_size) == rank]


@dataclass(frozen=True)
class SubtileReorder(_GroupedTiles):
    world_size: int
    row_offset: np.ndarray      # int64 [M, TN]: GEMM store table into the send buffer
    group_slices: np.ndarray    # int64 [groups, 2]: send-buffer slice of each group (W equal chunks)
    chunk_elements: np.ndarray  # int64 [groups]: elements each rank receives per group
    recv_start: np.ndarray      # int64 [groups]: where group g lands in every rank's receive buffer
    rows_per_rank: np.ndarray   # int64 [W]: rows each rank owns

    @property
    def buffer_elements(self) -> int:
        return int(self.group_slices[-1, 1])

    @property
    def recv_elements(self) -> int:
        return int(self.chunk_elements.sum())

    @property
    def max_rows(self) -> int:
        return int(self.rows_per_rank.max())

    def owned_rows(self, rank: int) -> np.ndarray:
        return owned_rows(self.grid.M, self.grid.BM, self.world_size, rank)

    @cached_property
    def tile_place(self) -> np.ndarray | None:
        """The store table as one place per tile: ``W`` subtiles of ``BM / W`` rows, one per rank's
        chunk of the group (see :attr:`TileReorder.tile_place`); None unless ``BM / W`` is a power
        of two."""
        return _tile_places(self.grid, self.row_offset, self.grid.BM // self.world_size,
                            self.chunk_elements[self.tile_group])

    def post_table_for(self, rank: int) -> np.ndarray:
        return self.recv_table(rank)

    def recv_table(self, rank: int) -> np.ndarray:
        """Gather table from rank's receive buffer to its owned rows (ascending), ``[rows_k, TN]``."""
        rows = self.owned_rows(rank)
        # The receive layout of rank k is chunk k of every group, i.e. the send layout with the
        # group start moved to recv_start and the chunk index k dropped.
        tile = (rows[:, None] // self.grid.BM) * self.grid.tiles_n + np.arange(self.grid.tiles_n)[None, :]
        g = self.tile_group[tile]
        send = self.row_offset[rows]
        return send - self.group_slices[g, 0] - rank * self.chunk_elements[g] + self.recv_start[g]

    def allgather_table(self) -> np.ndarray:
        """Gather table restoring global row order after an AllGather of ``[W, max_rows, N]``.

        This is the block-cyclic permutation, applied by the post step of the AllGather.
        """
        M, N, BM, W = self.grid.M, self.grid.N, self.grid.BM, self.world_size
        i = np.arange(M)
        k = (i % BM) // (BM // W)
        h = BM // W
        # Local index of row i among rank k's rows: h per full tile row above it, plus its offset.
        local = (i // BM) * h + (i % BM) % h
        base = (k * self.max_rows + local) * N
        return base[:, None] + np.arange(self.grid.tiles_n)[None, :] * self.grid.BN

    def contiguous_row_permutation(self) -> np.ndarray:
        """``perm`` such that a GEMM on ``A[perm]`` leaves rank ``k`` the rows ``k*R .. (k+1)*R - 1``
        of the original output, in order (standard ReduceScatter ownership)."""
        counts = self.rows_per_rank
        if np.any(counts != counts[0]):
            raise ReorderError(
                f"contiguous ownership needs every rank to own the same number of rows; with M="
                f"{self.grid.M}, BM={self.grid.BM}, W={self.world_size} they own {counts.tolist()}")
        R = int(counts[0])
        perm = np.empty(self.grid.M, dtype=np.int64)
        for k in range(self.world_size):
            perm[self.owned_rows(k)] = np.arange(k * R, (k + 1) * R)
        return perm


def subtile_reorder(grid: TileGrid, partition, world_size: int) -> SubtileReorder:
    _check_world(world_size)
    if grid.BM % world_size:
        raise ReorderError(f"tile height BM={grid.BM} must be divisible by the world size {world_size}")
    g = _grouped(grid, partition)
    W, h = world_size, grid.BM // world_size
    order = _slot_order(grid, g.tile_group)
    # Every subtile is stored with h rows (a tail tile's missing rows are padding), so all W chunks
    # of a group have the same size, as ReduceScatter requires.
    sub = h * grid.tile_cols(np.arange(grid.num_tiles)).astype(np.int64)
    pos = np.empty(grid.num_tiles, dtype=np.int64)
    for gi in range(g.num_groups):
        ids = order[g.tile_group[order] == gi]
        pos[ids] = np.concatenate(([0], np.cumsum(sub[ids])[:-1]))
    chunk = np.bincount(g.tile_group, weights=sub, minlength=g.num_groups).astype(np.int64)
    group_start = W * np.concatenate(([0], np.cumsum(chunk)[:-1]))
    tile, r, cols, _ = _row_coords(grid)
    tg = g.tile_group[tile]
    row_offset = group_start[tg] + (r // h) * chunk[tg] + pos[tile] + (r % h) * cols
    slices = np.stack([group_start, group_start + W * chunk], axis=1)
    recv_start = np.concatenate(([0], np.cumsum(chunk)[:-1]))
    rows = np.array([len(owned_rows(grid.M, grid.BM, W, k)) for k in range(W)], dtype=np.int64)
    return SubtileReorder(grid, g.partition, g.tile_group, g.group_tiles, W,
                          np.ascontiguousarray(row_offset, dtype=np.int64), slices, chunk, recv_start, rows)


# --- All-to-All: subtoken unit -----------------------------------------------------------------
@dataclass(frozen=True)
class SubtokenReorder(_GroupedTiles):
    world_size: int
    rank: int
    row_offset: np.ndarray      # int64 [M, TN]: this rank's GEMM store table into its send buffer
    send_counts: np.ndarray     # int64 [groups, W]: elements this rank sends to each rank per group
    send_offsets: np.ndarray    # int64 [groups, W]
    recv_counts: np.ndarray     # int64 [groups, W]: elements this rank receives from each rank
    recv_offsets: np.ndarray    # int64 [groups, W]
    recv_table: np.ndarray      # int64 [out_rows, TN]: gather table receive buffer -> output rows

    @property
    def buffer_elements(self) -> int:
        return self.grid.M * self.grid.N

    @property
    def recv_elements(self) -> int:
        return int(self.recv_counts.sum())

    @property
    def out_rows(self) -> int:
        return self.recv_table.shape[0]

    def post_table_for(self, rank: int) -> np.ndarray:
        if rank != self.rank:
            raise ReorderError(f"these All-to-All tables are rank {self.rank}'s, not rank {rank}'s")
        return self.recv_table


def _check_routing(grid: TileGrid, world_size: int, dest_all, dst_index_all) -> tuple[list, list]:
    _check_world(world_size)
    if len(dest_all) != world_size or len(dst_index_all) != world_size:
        raise ReorderError(f"routing must give one destination array and one index array per rank "
                           f"({world_size}); got {len(dest_all)} and {len(dst_index_all)}")
    dests, idxs = [], []
    for s, (d, x) in enumerate(zip(dest_all, dst_index_all)):
        d, x = np.asarray(d), np.asarray(x)
        if d.shape != (grid.M,) or x.shape != (grid.M,):
            raise ReorderError(f"rank {s}: routing arrays must have shape ({grid.M},) (one entry per "
                               f"output row; every rank runs the same GEMM shape), got {d.shape} and {x.shape}")
        if not (np.issubdtype(d.dtype, np.integer) and np.issubdtype(x.dtype, np.integer)):
            raise ReorderError(f"rank {s}: routing arrays must be integers")
        if d.size and (d.min() < 0 or d.max() >= world_size):
            raise ReorderError(f"rank {s}: destination ranks must lie in [0, {world_size})")
        dests.append(d.astype(np.int64))
        idxs.append(x.astype(np.int64))
    for q in range(world_size):
        got = np.concatenate([x[d == q] for d, x in zip(dests, idxs)])
        if not np.array_equal(np.sort(got), np.arange(len(got))):
            raise ReorderError(f"rows sent to rank {q} must carry destination indices forming a "
                               f"permutation of 0..{len(got) - 1} (each output row filled exactly once)")
    return dests, idxs


def _subtoken_send_layout(grid: TileGrid, g: _GroupedTiles, dest: np.ndarray, W: int):
    """Send-side table and (group, destination) counts/offsets for one rank's routing."""
    BM, TN, G = grid.BM, grid.tiles_n, g.num_groups
    tm_of_row = np.arange(grid.M) // BM
    # Rows of tile row tm going to d, and each row's rank among those rows (stable order).
    rows_td = np.zeros((grid.tiles_m, W), dtype=np.int64)
    np.add.at(rows_td, (tm_of_row, dest), 1)
    key = tm_of_row * W + dest
    sorted_rows = np.argsort(key, kind="stable")
    first = np.searchsorted(key[sorted_rows], key[sorted_rows], side="left")
    rank_in = np.empty(grid.M, dtype=np.int64)
    rank_in[sorted_rows] = np.arange(grid.M) - first
    cols = grid.tile_cols(np.arange(grid.num_tiles)).astype(np.int64)
    elems_td = rows_td[np.arange(grid.num_tiles) // TN] * cols[:, None]   # [tiles, W]
    counts = np.zeros((G, W), dtype=np.int64)
    np.add.at(counts, g.tile_group, elems_td)
    group_start = np.concatenate(([0], np.cumsum(counts.sum(1))[:-1]))
    dest_start = group_start[:, None] + np.concatenate(
        (np.zeros((G, 1), dtype=np.int64), np.cumsum(counts, 1)[:, :-1]), axis=1)
    order = _slot_order(grid, g.tile_group)
    base = np.empty((grid.num_tiles, W), dtype=np.int64)
    for gi in range(G):
        ids = order[g.tile_group[order] == gi]
        run = np.cumsum(elems_td[ids], axis=0) - elems_td[ids]
        base[ids] = dest_start[gi][None, :] + run
    tile, _, colsm, i = _row_coords(grid)
    table = base[tile, dest[i]] + rank_in[i] * colsm
    return np.ascontiguousarray(table, dtype=np.int64), counts, dest_start


def subtoken_reorder(grid: TileGrid, partition, dest_all, dst_index_all, rank: int) -> SubtokenReorder:
    """All-to-All tables for ``rank``, given every rank's routing.

    ``dest_all[s][i]`` is the rank that output row ``i`` of rank ``s`` goes to, and
    ``dst_index_all[s][i]`` the row it fills in that rank's output (MoE combine: the token's slot).
    Every rank runs the same GEMM shape and partition (groups pair up across ranks).
    """
    W = len(dest_all)
    dests, idxs = _check_routing(grid, W, dest_all, dst_index_all)
    if not 0 <= rank < W:
        raise ReorderError(f"rank {rank} out of range for world size {W}")
    g = _grouped(grid, partition)
    layouts = [_subtoken_send_layout(grid, g, d, W) for d in dests]
    table, send_counts, send_offsets = layouts[rank]
    recv_counts = np.stack([layouts[s][1][:, rank] for s in range(W)], axis=1)    # [G, W(src)]
    flat = recv_counts.reshape(-1)
    recv_offsets = np.concatenate(([0], np.cumsum(flat)[:-1])).reshape(recv_counts.shape)
    out_rows = int(sum((d == rank).sum() for d in dests))
    recv_table = np.empty((out_rows, grid.tiles_n), dtype=np.int64)
    for s in range(W):
        rows = np.nonzero(dests[s] == rank)[0]
        if rows.size == 0:
            continue
        s_table, _, s_start = layouts[s]
        tile = (rows[:, None] // grid.BM) * grid.tiles_n + np.arange(grid.tiles_n)[None, :]
        gi = g.tile_group[tile]
        recv_table[idxs[s][rows]] = s_table[rows] - s_start[gi, rank] + recv_offsets[gi, s]
    return SubtokenReorder(g.grid, g.partition, g.tile_group, g.group_tiles, W, rank, table,
                           send_counts, send_offsets, recv_counts, recv_offsets, recv_table)
