"""ReduceScatter reorder: each tile's rows cut into ``W`` subtiles of ``BM / W`` rows; chunk ``k`` of
a group's slice is subtile ``k`` of every tile in the group, so one ReduceScatter per group delivers
it to rank ``k``, which then owns the block-cyclic rows :func:`owned_rows`."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..tiling import TileGrid
from .common import ReorderError, _check_world, _grouped, _GroupedTiles, _row_coords, _slot_order, _tile_places


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

    def _owned_entries(self, rank: int):
        """The owned rows of ``rank`` and the group of each (row, tile column) entry, ``[rows_k, TN]``."""
        rows = self.owned_rows(rank)
        tile = (rows[:, None] // self.grid.BM) * self.grid.tiles_n + np.arange(self.grid.tiles_n)[None, :]
        return rows, self.tile_group[tile]

    def recv_table(self, rank: int) -> np.ndarray:
        """Gather table from rank's receive buffer to its owned rows (ascending), ``[rows_k, TN]``."""
        rows, g = self._owned_entries(rank)
        # The receive layout of rank k is chunk k of every group, i.e. the send layout with the
        # group start moved to recv_start and the chunk index k dropped.
        send = self.row_offset[rows]
        return send - self.group_slices[g, 0] - rank * self.chunk_elements[g] + self.recv_start[g]

    def gathered_tables(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """For a receive buffer laid out like the send buffer, each group holding ``W`` copies of
        ``rank``'s chunk (one from every rank, copy ``q`` at ``q x chunk``: an All-to-All per group):
        ``(post table of copy 0, the stride between copies)``, both ``[rows_k, TN]``."""
        rows, g = self._owned_entries(rank)
        # Offset o within the reduced chunk (recv_start[g] + o) -> copy 0 at W recv_start[g] + o.
        post = self.recv_table(rank) + (self.world_size - 1) * self.recv_start[g]
        return np.ascontiguousarray(post, dtype=np.int64), np.ascontiguousarray(self.chunk_elements[g], dtype=np.int64)

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
