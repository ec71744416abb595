"""The counting table of one call, step by step (:func:`counting_trace`), from an AllReduce plan's
tables, and what the send buffer holds after each collective (:func:`predicted_buffers`) and after
the post-reorder (:func:`post_reorder`)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ... import reorder
from ...tiling import TileGrid


class MechanismError(AssertionError):
    """The tables, the trace and a real run of the plan disagree."""


@dataclass(frozen=True)
class Step:
    """One event of a call. ``kind``: ``"start"`` (nothing done), ``"tile"`` (``tile`` stored and
    counted) or ``"post"`` (the post-reorder). ``counts`` is the counting table after the step;
    ``fired`` the group whose counter reached its target at this step, ``slice`` its ``[start,
    stop)`` in the send buffer (elements)."""

    index: int
    kind: str
    counts: tuple[int, ...]
    done: frozenset = frozenset()        # tiles stored into the send buffer so far
    reduced: tuple[int, ...] = ()        # groups whose collective has run
    tile: int | None = None
    wave: int | None = None
    cta: int | None = None
    fired: int | None = None
    slice: tuple[int, int] | None = None

    def describe(self, group_tiles) -> str:
        if self.kind == "start":
            return "start: counting table " + _counts(self.counts)
        if self.kind == "post":
            return "post-reorder (post_table): tiles back\nto row-major"
        g = self.fired
        text = f"tile {self.tile} done (wave {self.wave + 1}, CTA {self.cta}) -> {_counts(self.counts)}"
        if self.fired is not None:
            text += f"\nG{g + 1} full: AllReduce on [{self.slice[0]}, {self.slice[1]})"
        return text


def _counts(counts) -> str:
    return "[" + ", ".join(str(c) for c in counts) + "]"


@dataclass(frozen=True)
class Trace:
    """The event sequence of one call of an AllReduce (tile layout) plan, and the tables it came from."""

    grid: TileGrid
    partition: tuple[int, ...]
    tile_group: np.ndarray       # [tiles] group of each row-major tile id
    group_tiles: np.ndarray      # [groups] counting-table target of each group
    group_slices: np.ndarray     # [groups, 2] each group's [start, stop), from the store table
    tile_offset: np.ndarray      # [tiles] where the GEMM stores each tile's first element
    post_offset: np.ndarray      # [tiles] where the post-reorder reads it back from
    steps: list[Step] = field(default_factory=list)

    @property
    def num_groups(self) -> int:
        return len(self.group_tiles)

    @property
    def tile_slot(self) -> np.ndarray:
        """Each tile's position in the send buffer, counted in tiles (the buffer order)."""
        slot = np.empty(self.grid.num_tiles, dtype=np.int64)
        slot[np.argsort(self.tile_offset, kind="stable")] = np.arange(self.grid.num_tiles)
        return slot

    def fired_order(self) -> list[int]:
        return [s.fired for s in self.steps if s.fired is not None]

    def wave_ends(self) -> pd.DataFrame:
        """The counting table at the end of each wave and the groups that fired during it: the
        seed's per-wave view of the same trace."""
        rows = []
        for w in range(self.grid.num_waves):
            in_wave = [s for s in self.steps if s.kind == "tile" and s.wave == w]
            rows.append({"wave": f"W{w + 1}", "tiles": [s.tile for s in in_wave],
                         "counts": list(in_wave[-1].counts),
                         "fires": [f"G{s.fired + 1}" for s in in_wave if s.fired is not None]})
        return pd.DataFrame(rows)

    def table(self) -> pd.DataFrame:
        """One row per step: what a reader follows with the slider."""
        # Blank, not NaN (which would also turn the tile ids into floats), where a step has no tile.
        return pd.DataFrame([{"step": s.index, "event": s.kind, "tile": "" if s.tile is None else s.tile,
                              "wave": "" if s.wave is None else f"W{s.wave + 1}", "cta": "" if s.cta is None else s.cta,
                              "counts": list(s.counts), "fires": "" if s.fired is None else f"G{s.fired + 1}",
                              "slice": "" if s.slice is None else f"[{s.slice[0]}, {s.slice[1]})"}
                             for s in self.steps]).set_index("step")


def counting_trace(tables, rank: int = 0) -> Trace:
    """The counting table of one call, tile by tile, from an AllReduce plan's tables
    (:func:`fo_lib.reorder.tile_reorder`, e.g. ``plan.tables``).

    Tiles finish in schedule order: wave ``w`` is schedule indices ``[w * ctas, (w + 1) * ctas)``,
    and inside a wave CTA 0 is counted first (on a GPU the CTAs of a wave finish within a few percent
    of each other, in no fixed order: only the wave's end state is fixed). A group's slice is read
    off the store table, not copied from ``group_slices``, and must be contiguous."""
    if not isinstance(tables, reorder.TileReorder):
        raise TypeError(f"the walkthrough traces the AllReduce tile layout (reorder.TileReorder), got "
                        f"{type(tables).__name__}")
    grid = tables.grid
    tm, tn = np.divmod(np.arange(grid.num_tiles), grid.tiles_n)
    offset = tables.row_offset[tm * grid.BM, tn]
    post = np.asarray(tables.post_table_for(rank))[tm * grid.BM, tn]
    sizes = grid.tile_elements()
    slices = np.zeros((len(tables.group_tiles), 2), dtype=np.int64)
    for g in range(len(tables.group_tiles)):
        mine = np.flatnonzero(tables.tile_group == g)
        lo, hi = int(offset[mine].min()), int((offset[mine] + sizes[mine]).max())
        if hi - lo != int(sizes[mine].sum()):
            raise MechanismError(f"group {g + 1}'s tiles are not contiguous in the send buffer ([{lo}, {hi}) holds "
                                 f"{int(sizes[mine].sum())} elements): no single collective could send them")
        slices[g] = lo, hi
    trace = Trace(grid, tuple(tables.partition), np.asarray(tables.tile_group), np.asarray(tables.group_tiles),
                  slices, offset, post)
    counts = [0] * trace.num_groups
    done: set[int] = set()
    reduced: list[int] = []
    trace.steps.append(Step(0, "start", tuple(counts)))
    for s, tile in enumerate(grid.schedule):
        tile = int(tile)
        g = int(tables.tile_group[tile])
        counts[g] += 1  # the epilogue's atomicAdd(&group_counter[tile_group[tile]], 1)
        done.add(tile)
        fired = g if counts[g] == trace.group_tiles[g] else None  # the wait's target reached
        if fired is not None:
            reduced.append(g)
        trace.steps.append(Step(len(trace.steps), "tile", tuple(counts), frozenset(done), tuple(reduced), tile,
                                s // grid.ctas, s % grid.ctas, fired,
                                None if fired is None else tuple(int(v) for v in slices[g])))
    trace.steps.append(Step(len(trace.steps), "post", tuple(counts), frozenset(done), tuple(reduced)))
    return trace


def predicted_buffers(trace: Trace, C: np.ndarray, world_size: int) -> list[np.ndarray]:
    """The send buffer after each collective, from the trace alone: tiles stored through the store
    table, the slices of the groups fired so far summed over ``world_size`` identical ranks, every
    later slot still zero (the CPU executor stores and reduces one group at a time)."""
    grid = trace.grid
    buf = np.zeros(grid.M * grid.N)
    tm, tn = np.divmod(np.arange(grid.num_tiles), grid.tiles_n)
    out = []
    for g in trace.fired_order():
        for t in np.flatnonzero(trace.tile_group == g):
            rows, cols = int(grid.tile_rows(t)), int(grid.tile_cols(t))
            r0, c0 = tm[t] * grid.BM, tn[t] * grid.BN
            o = trace.tile_offset[t]
            buf[o:o + rows * cols] = world_size * C[r0:r0 + rows, c0:c0 + cols].reshape(-1)
        out.append(buf.copy())
    return out


def post_reorder(trace: Trace, buf: np.ndarray) -> np.ndarray:
    """The post-reorder of the trace's last step: each tile read back from ``post_offset``."""
    grid = trace.grid
    C = np.empty((grid.M, grid.N), dtype=buf.dtype)
    for t in range(grid.num_tiles):
        tm, tn = divmod(t, grid.tiles_n)
        rows, cols = int(grid.tile_rows(t)), int(grid.tile_cols(t))
        o = trace.post_offset[t]
        r0, c0 = tm * grid.BM, tn * grid.BN
        C[r0:r0 + rows, c0:c0 + cols] = buf[o:o + rows * cols].reshape(rows, cols)
    return C
