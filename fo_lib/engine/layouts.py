"""One buffer layout per primitive: its reorder tables, each group's slices of the buffers, the
collective a group runs on them, and where the post-reorder reads the result.

Every layout answers the same questions (:class:`BufferLayout`), so the plan and its executors
never ask which primitive they run:

* :class:`AllReduceTiles`: each group's tiles contiguous (:func:`fo_lib.reorder.tile_reorder`),
  one in-place AllReduce per group, the post-reorder gathers the tiles back.
* :class:`AllReduceRows`: groups cut at whole tile-row bands (:func:`fo_lib.reorder.row_reorder`):
  the GEMM stores ``C`` in place and the AllReduces work on row ranges of it.
* :class:`AllReduceGathered`: an in-place AllGather per group into ``W`` copies
  (:func:`fo_lib.reorder.gather_reorder`), summed by the post-reorder (fp32).
* :class:`ReduceScatterLayout`: subtile ``k`` of every tile goes to rank ``k``
  (:func:`fo_lib.reorder.subtile_reorder`); rank ``k`` owns :attr:`owned_rows`.
* :class:`AllToAllLayout`: each group's rows per destination contiguous
  (:func:`fo_lib.reorder.subtoken_reorder`), one All-to-All per group.
"""
from __future__ import annotations

import numpy as np

from .. import postops, reorder
from .errors import PlanError

PRIMITIVES = ("all_reduce", "reduce_scatter", "all_to_all")
LAYOUTS = ("tiles", "rows")
REDUCTIONS = ("collective", "post_reorder")


class BufferLayout:
    """The buffers of one primitive on one rank. ``collective``: what each group runs (and whose
    link curve models it); ``sources``: copies the post-reorder sums per element; ``result``:
    the buffer the collective leaves its result in (``"send"``, in place, or ``"recv"``)."""

    collective = ""
    sources = 1
    result = "send"
    stores_in_place = False  # the GEMM writes C row-major (no store table)
    # Its collective only moves equal chunks (NCCL can run it on the copy engines, beside a GEMM
    # that holds every SM but one): the layouts reduced by the post-reorder.
    copy_engine_ok = False

    def __init__(self, grid, partition, world_size: int, rank: int):
        self.world_size, self.rank = int(world_size), int(rank)
        self.tables = self.build(grid, partition)
        self.post_table = self.tables.post_table_for(self.rank)
        self.out_rows = grid.M
        self.peer_stride = None

    def build(self, grid, partition):
        raise NotImplementedError

    @property
    def recv_elements(self) -> int:
        return self.tables.recv_elements

    @property
    def num_groups(self) -> int:
        """Groups of a call: one per part of the partition (the rows layout may merge some)."""
        return len(self.tables.group_tiles)

    def slices(self) -> list[dict]:
        """Per group, the buffer slices (``send``, ``recv``: ``(start, stop)``) its collective uses."""
        return [dict(send=tuple(int(v) for v in self.tables.group_slices[g])) for g in range(self.num_groups)]

    def call(self, comm, sl: dict, send, recv, **kw) -> None:
        """Run one group's collective on its slices ``sl`` of the plan's buffers."""
        raise NotImplementedError

    def describe(self) -> str:
        return ""

    def post_stages(self, slices) -> tuple[tuple[int, int, int], ...]:
        """``(group, first row, end row)`` per stage of the staged post-reorder: the output rows whose
        every source element lies in the buffer regions of groups ``<= group``, so that they can be
        restored as soon as that group's collective has finished, while later groups still
        communicate. Rows stay in order (whole rows: RMSNorm needs them) and the last stage ends
        at the last row."""
        G = self.num_groups
        key = "recv" if "recv" in slices[0] else "send"  # where each collective leaves its result
        spans = sorted((sl[key][0], sl[key][1], g) for g, sl in enumerate(slices) if sl[key][1] > sl[key][0])
        starts = np.array([lo for lo, _, _ in spans], dtype=np.int64)
        table = np.asarray(self.post_table, dtype=np.int64)
        if table.size == 0:  # no rows (an All-to-All rank that receives nothing): one empty stage
            return ((G - 1, 0, 0),)
        pos = np.searchsorted(starts, table, side="right") - 1
        if (pos < 0).any() or (table >= np.array([hi for _, hi, _ in spans])[pos]).any():
            raise PlanError("the post-reorder table reads outside every group's buffer region")
        group = np.array([g for _, _, g in spans], dtype=np.int64)[pos]
        ready = np.maximum.accumulate(group.max(axis=1))  # rows in order: a stage is a row prefix
        # Two stages at most: the rows every group but the last completes, then the rest. A stage
        # shares the caller's stream, so none starts before the GEMM ends; by then the early groups'
        # rows are all ready, and what matters is that only the last group's rows wait for the
        # last collective (more stages cost a launch each for nothing).
        early = int(np.searchsorted(ready, G - 2, side="right")) if G > 1 else 0
        if early in (0, len(ready)):
            return ((int(ready[-1]), 0, len(ready)),)
        return ((int(ready[early - 1]), 0, early), (int(ready[-1]), early, len(ready)))


class AllReduceTiles(BufferLayout):
    collective = "all_reduce"

    def build(self, grid, partition):
        return reorder.tile_reorder(grid, partition)

    def call(self, comm, sl, send, recv, **kw):
        s, e = sl["send"]
        comm.all_reduce(send[s:e], **kw)


class AllReduceRows(AllReduceTiles):
    stores_in_place = True

    def build(self, grid, partition):
        return reorder.row_reorder(grid, partition)

    def describe(self) -> str:
        return f", layout rows (row cuts {self.tables.row_cuts.tolist()})"


def _check_copies(world_size: int) -> None:
    """A reduction by the post-reorder sums one copy per rank: at most ``postops.MAX_SOURCES``."""
    if not 1 <= int(world_size) <= postops.MAX_SOURCES:
        raise PlanError(f"reduction='post_reorder' sums at most {postops.MAX_SOURCES} copies, the world has "
                        f"{world_size} ranks")


class _SumsCopies:
    """A layout reduced by the post-reorder (``reduction="post_reorder"``): its collective only moves
    data (copy engines can carry it) and the post-reorder sums one copy per rank."""

    copy_engine_ok = True

    def _sum_copies(self, peer_stride) -> None:
        self.sources = self.world_size
        self.peer_stride = peer_stride if self.sources > 1 else None  # one copy: nothing to sum


class AllReduceGathered(_SumsCopies, BufferLayout):
    collective = "all_gather"

    def __init__(self, grid, partition, world_size, rank):
        _check_copies(world_size)
        super().__init__(grid, partition, world_size, rank)
        self._sum_copies(self.tables.peer_stride)

    def build(self, grid, partition):
        return reorder.gather_reorder(grid, partition, self.world_size, self.rank)

    def slices(self):
        t = self.tables
        # In place: this rank's copy inside the group's W copies.
        return [dict(send=tuple(int(v) for v in t.own_slices[g]), recv=tuple(int(v) for v in t.group_slices[g]))
                for g in range(self.num_groups)]

    def call(self, comm, sl, send, recv, **kw):
        (s, e), (r0, r1) = sl["send"], sl["recv"]
        comm.all_gather(send[s:e], send[r0:r1], **kw)

    def describe(self) -> str:
        return ", reduced in the post-reorder (AllGather per group)"


class ReduceScatterLayout(BufferLayout):
    collective = "reduce_scatter"
    result = "recv"

    def __init__(self, grid, partition, world_size, rank):
        super().__init__(grid, partition, world_size, rank)
        self.owned_rows = self.tables.owned_rows(self.rank)
        self.out_rows = len(self.owned_rows)

    def build(self, grid, partition):
        return reorder.subtile_reorder(grid, partition, self.world_size)

    def slices(self):
        t, out = self.tables, []
        for g in range(self.num_groups):
            s, e = (int(v) for v in t.group_slices[g])
            r0 = int(t.recv_start[g])
            out.append(dict(send=(s, e), recv=(r0, r0 + int(t.chunk_elements[g]))))
        return out

    def call(self, comm, sl, send, recv, **kw):
        (s, e), (r0, r1) = sl["send"], sl["recv"]
        comm.reduce_scatter(send[s:e], recv[r0:r1], **kw)


class ReduceScatterGathered(_SumsCopies, ReduceScatterLayout):
    """ReduceScatter reduced by the post-reorder: each group's W chunks go to their owners by one
    All-to-All (pure data movement: copy engines can carry it, no SM sums anything), and the
    post-reorder sums the W copies of this rank's chunk. Group g's copies land where its send
    region lies (the receive buffer is as large as the send buffer), copy q at ``q x chunk``."""

    collective = "all_to_all"

    def __init__(self, grid, partition, world_size, rank):
        _check_copies(world_size)
        super().__init__(grid, partition, world_size, rank)
        self.post_table, stride = self.tables.gathered_tables(self.rank)
        self._sum_copies(stride)

    @property
    def recv_elements(self) -> int:
        return self.tables.buffer_elements

    def slices(self):
        t, out = self.tables, []
        for g in range(self.num_groups):
            s, e = (int(v) for v in t.group_slices[g])
            out.append(dict(send=(s, e), recv=(s, e), counts=[int(t.chunk_elements[g])] * self.world_size))
        return out

    def call(self, comm, sl, send, recv, **kw):
        (s, e), (r0, r1) = sl["send"], sl["recv"]
        comm.all_to_all(send[s:e], sl["counts"], recv[r0:r1], sl["counts"], **kw)

    def describe(self) -> str:
        return ", reduced in the post-reorder (All-to-All per group)"


class AllToAllLayout(BufferLayout):
    collective = "all_to_all"
    result = "recv"

    def __init__(self, grid, partition, world_size, rank, routing=None):
        if routing is None:
            raise PlanError("all_to_all needs a Routing (destination and slot of every output row)")
        if len(routing.dest) != int(world_size):
            raise PlanError(f"routing covers {len(routing.dest)} ranks, the communicator has {world_size}")
        self.routing = routing
        super().__init__(grid, partition, world_size, rank)
        self.out_rows = self.tables.out_rows

    def build(self, grid, partition):
        try:
            return reorder.subtoken_reorder(grid, partition, self.routing.dest, self.routing.dst_index, self.rank)
        except reorder.ReorderError as exc:
            raise PlanError(str(exc)) from None

    def slices(self):
        t, out = self.tables, []
        for g in range(self.num_groups):
            s0, r0 = int(t.send_offsets[g, 0]), int(t.recv_offsets[g, 0])
            out.append(dict(send=(s0, s0 + int(t.send_counts[g].sum())), recv=(r0, r0 + int(t.recv_counts[g].sum())),
                            send_counts=t.send_counts[g].tolist(), recv_counts=t.recv_counts[g].tolist()))
        return out

    def call(self, comm, sl, send, recv, **kw):
        (s, e), (r0, r1) = sl["send"], sl["recv"]
        comm.all_to_all(send[s:e], sl["send_counts"], recv[r0:r1], sl["recv_counts"], **kw)


_BY_KEY = {("all_reduce", "tiles", "collective"): AllReduceTiles,
           ("all_reduce", "rows", "collective"): AllReduceRows,
           ("all_reduce", "tiles", "post_reorder"): AllReduceGathered,
           ("reduce_scatter", "tiles", "collective"): ReduceScatterLayout,
           ("reduce_scatter", "tiles", "post_reorder"): ReduceScatterGathered,
           ("all_to_all", "tiles", "collective"): AllToAllLayout}


def layout_class(primitive: str, layout: str = "tiles", reduction: str = "collective") -> type[BufferLayout]:
    """The buffer layout of a (primitive, layout, reduction); :class:`PlanError` for a combination
    that does not exist."""
    for name, value, allowed in (("primitive", primitive, PRIMITIVES), ("layout", layout, LAYOUTS),
                                 ("reduction", reduction, REDUCTIONS)):
        if value not in allowed:
            raise PlanError(f"{name} must be one of {allowed}, got {value!r}")
    if layout == "rows" and primitive != "all_reduce":
        raise PlanError(f"the rows layout is for all_reduce (whole rows per group), not {primitive}")
    if reduction == "post_reorder" and (primitive not in ("all_reduce", "reduce_scatter") or layout != "tiles"):
        raise PlanError(f"reduction='post_reorder' is for all_reduce or reduce_scatter in the tiles layout, not "
                        f"{primitive} in the {layout} layout")
    return _BY_KEY[(primitive, layout, reduction)]


def group_collective(primitive: str, reduction: str = "collective") -> str:
    """The collective each wave group of a plan runs (and whose link curve models it): the
    primitive, or for a reduction by the post-reorder the data movement alone: ``"all_gather"``
    (AllReduce), ``"all_to_all"`` (ReduceScatter). All-to-All has no choice of reduction."""
    if reduction == "post_reorder":
        return {"all_reduce": "all_gather", "reduce_scatter": "all_to_all"}.get(primitive, primitive)
    return primitive


def layout_config(config, layout: str):
    """The tile config a layout runs: the rows layout walks a row-major raster (bands of one tile
    row, the finest row cuts); the tiles layout keeps ``config``."""
    return config.with_raster("row", 1) if layout == "rows" else config
