"""All-to-All reorder (MoE combine): inside a group the rows ("subtokens") are sorted by destination
rank, so one grouped send/recv per group moves them; the receiver gathers them back by a table."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tiling import TileGrid
from .common import ReorderError, _check_world, _grouped, _GroupedTiles, _row_coords, _slot_order


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
