"""The mechanism walkthrough (notebook 00): the counting table of one plan, step by step.

Everything here is derived from the plan's own tables (:mod:`fo_lib.reorder`) and wave model
(:class:`fo_lib.tiling.TileGrid`), never drawn by hand:

* :func:`counting_trace` replays a call the way the signalling GEMM runs it: tiles finish in
  schedule order (wave by wave, CTA by CTA inside a wave), each bumps its group's counter
  (``tile_group``), a group fires when its counter reaches ``group_tiles[g]``, and its collective
  runs on the slice its tiles were stored into (read off ``row_offset``); a last step gathers the
  tiles back to row-major through ``post_table_for(rank)``.
* :class:`RecordingCommunicator` and :func:`check_against_run` hold the trace against a real
  CPU run of :class:`fo_lib.engine.OverlapPlan`: each collective's slice and the whole send buffer
  after it.
* :func:`draw_step` draws one step on one axes (output tiles, counting table, send buffer).
* :func:`design_comparison` is Table 1 of the paper on a given GEMM: decomposition (k smaller
  GEMMs), fusion (communication per tile inside the GEMM) and signalling, with the wave counts and
  fills of :class:`~fo_lib.tiling.TileGrid`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import reorder
from ..comm.cpu_loopback import CpuLoopbackCommunicator
from ..tiling import TileGrid


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


# --- holding the trace against a real run ----------------------------------------------------------
class RecordingCommunicator(CpuLoopbackCommunicator):
    """The CPU loopback, recording each AllReduce: where its slice lies in ``watch`` (the plan's
    send buffer, set by :func:`run_recorded`) and a copy of the whole buffer after it."""

    def __init__(self, world_size: int, rank: int = 0):
        super().__init__(world_size, rank)
        self.watch = None
        self.calls: list[dict] = []

    def all_reduce(self, buf, *, timeout_s: float | None = None) -> None:
        super().all_reduce(buf, timeout_s=timeout_s)
        if self.watch is not None:
            start = buf.storage_offset() - self.watch.storage_offset()
            self.calls.append({"slice": (start, start + buf.numel()),
                               "buffer": self.watch.double().numpy().copy()})


def run_recorded(plan, a, b):
    """One call of ``plan`` (built on a :class:`RecordingCommunicator`); returns the output and the
    recorded collectives (slice, send buffer after it), in the order they ran."""
    comm = plan.comm
    if not isinstance(comm, RecordingCommunicator):
        raise TypeError("build the plan on a RecordingCommunicator to record its collectives")
    comm.watch, comm.calls = plan.send, []
    out = plan.run(a, b)
    return out, list(comm.calls)


def check_against_run(trace: Trace, calls: list[dict], C: np.ndarray, world_size: int, out=None) -> pd.DataFrame:
    """Raise :class:`MechanismError` unless the plan's run did what the trace says: one collective per
    fired group, in the fired order, on the trace's slice, leaving the send buffer the trace predicts
    (exactly: summing ``W`` identical bf16 copies is a power-of-two scale for ``W`` = 1, 2, 4, ...;
    otherwise to a bf16 rounding), and, given ``out``, a post-reorder equal to ``W * C``. Returns
    one row per collective."""
    want = predicted_buffers(trace, C, world_size)
    exact = world_size & (world_size - 1) == 0
    if len(calls) != len(want):
        raise MechanismError(f"the plan ran {len(calls)} collectives, the trace fires {len(want)} groups")
    rows = []
    for g, call, buf in zip(trace.fired_order(), calls, want):
        sl = tuple(int(v) for v in trace.group_slices[g])
        err = float(np.abs(call["buffer"] - buf).max())
        ok = call["slice"] == sl and (err == 0 if exact else np.allclose(call["buffer"], buf, rtol=1e-2, atol=1e-2))
        if not ok:
            raise MechanismError(f"group G{g + 1}: the plan's collective ran on {call['slice']}, the trace says {sl}; "
                                 f"largest buffer difference {err:g}")
        rows.append({"group": f"G{g + 1}", "trace slice": sl, "plan slice": call["slice"],
                     "max |plan buffer - trace buffer|": err})
    if out is not None:
        final = post_reorder(trace, want[-1])
        got = np.asarray(out, dtype=np.float64)
        if not (np.array_equal(got, final) if exact else np.allclose(got, final, rtol=1e-2, atol=1e-2)):
            raise MechanismError("the plan's output differs from the trace's post-reorder of its buffer")
    return pd.DataFrame(rows)


# --- drawing ---------------------------------------------------------------------------------------
GROUP_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")


def _color(g: int) -> str:
    return GROUP_COLORS[g % len(GROUP_COLORS)]


def draw_step(ax, trace: Trace, step: int, *, world_size: int | None = None, fontsize: float = 8) -> None:
    """Draw step ``step`` of ``trace`` on ``ax``: the output C in tiles where they belong (top; label:
    tile id and wave), the counting table (middle) and the send buffer in buffer order with each
    group's slice (bottom). Dashed: not computed yet; pale: stored and counted; full colour: its
    group's collective has run (in the buffer) or, at the post step, restored to C. The tile of the
    step has a black frame."""
    from matplotlib.patches import FancyBboxPatch, Rectangle

    st = trace.steps[step]
    grid = trace.grid
    TM, TN, T, G = grid.tiles_m, grid.tiles_n, grid.num_tiles, trace.num_groups
    width = max(TN, 0.6 * T, 1.4 * G)
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_aspect("equal")
    ax.axis("off")
    summed = "AllReduce" if world_size is None else f"AllReduce: \u03a3\u00d7{world_size}"

    def tile_box(x, y, w, h, t, label, final):
        g = int(trace.tile_group[t])
        stored = t in st.done
        face, alpha = (_color(g), 1.0) if final else (_color(g), 0.35) if stored else ("white", 1.0)
        ax.add_patch(Rectangle((x, y), w, h, facecolor=face, alpha=alpha, linewidth=0))
        ax.add_patch(Rectangle((x, y), w, h, fill=False, edgecolor="black" if st.tile == t else _color(g),
                               linewidth=2.2 if st.tile == t else 0.8, linestyle="-" if stored else "--"))
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=fontsize,
                color="white" if final else "black" if stored else _color(g), fontweight="bold" if final else None)

    # Output C: tiles where they belong (row-major), top.
    x_off = (width - TN) / 2
    for t in range(T):
        tm, tn = divmod(t, TN)
        tile_box(x_off + tn, TM - 1 - tm, 0.96, 0.96, t, f"t{t}\nW{int(grid.tile_wave[t]) + 1}",
                 final=st.kind == "post")
    title = "C, restored from the buffer" if st.kind == "post" else "C = A @ B.T (tile id, wave)"
    ax.text(width / 2, TM + 0.1, title, ha="center", va="bottom", fontsize=fontsize)

    # Counting table, middle.
    yc = -1.6
    cw = width / G
    for g in range(G):
        full = st.counts[g] == trace.group_tiles[g]
        ax.add_patch(FancyBboxPatch((g * cw + 0.1, yc), cw - 0.2, 0.9, boxstyle="round,pad=0.02",
                                    facecolor=_color(g) if full else "white", edgecolor=_color(g),
                                    linewidth=2.6 if st.fired == g else 1.0))
        ax.text(g * cw + cw / 2, yc + 0.45, f"G{g + 1}: {st.counts[g]}/{trace.group_tiles[g]}", ha="center",
                va="center", fontsize=fontsize, color="white" if full else _color(g), fontweight="bold")
    ax.text(width / 2, yc + 0.95, "counting table (count / target)", ha="center", va="bottom", fontsize=fontsize)

    # Send buffer in buffer order, bottom, with each group's slice underneath.
    yb = -3.4
    slot = trace.tile_slot
    sw = width / T
    for t in range(T):
        tile_box(slot[t] * sw + 0.02, yb, sw - 0.04, 0.9, t, f"t{t}", final=int(trace.tile_group[t]) in st.reduced)
    for g in range(G):
        tiles = np.flatnonzero(trace.tile_group == g)
        lo, hi = slot[tiles].min() * sw, (slot[tiles].max() + 1) * sw
        done = g in st.reduced
        ax.plot([lo + 0.05, hi - 0.05], [yb - 0.12] * 2, color=_color(g), linewidth=3 if done else 1.2)
        s, e = trace.group_slices[g]
        ax.text((lo + hi) / 2, yb - 0.2, f"[{s}, {e})" + (f"\n{summed}" if done else ""), ha="center", va="top",
                fontsize=fontsize * 0.8, color=_color(g), fontweight="bold" if st.fired == g else None)
    ax.text(width / 2, yb + 0.95, "send buffer, group slices [start, stop)", ha="center", va="bottom",
            fontsize=fontsize)
    ax.set_ylim(yb - 1.1, TM + 0.6)
    ax.set_title(f"step {st.index}: " + st.describe(trace.group_tiles), fontsize=fontsize, loc="left")


def step_images(trace: Trace, *, world_size: int | None = None, dpi: int = 90) -> list[bytes]:
    """Every step drawn alone as PNG bytes: the frames of the notebook's slider, rendered once, so
    moving the slider swaps an image (no figure is drawn inside a widget callback)."""
    import io

    import matplotlib.pyplot as plt

    frames = []
    for step in range(len(trace.steps)):
        fig, ax = plt.subplots(figsize=(6, 6.5))
        draw_step(ax, trace, step, world_size=world_size, fontsize=10)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        frames.append(buf.getvalue())
    return frames


def draw_trace(trace: Trace, *, world_size: int | None = None, columns: int = 5, panel=(3.4, 3.6)):
    """Every step of ``trace`` as small multiples (the static view of the slider); returns the figure."""
    import matplotlib.pyplot as plt

    n = len(trace.steps)
    rows = -(-n // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(panel[0] * columns, panel[1] * rows), squeeze=False,
                             layout="constrained")
    for i, ax in enumerate(axes.flat):
        if i < n:
            draw_step(ax, trace, i, world_size=world_size, fontsize=7)
        else:
            ax.axis("off")
    fig.text(0.5, 0, "dashed: not computed yet | pale: stored in the send buffer and counted | full colour: its "
             "group's collective has run (buffer) or C is restored (post-reorder) | black frame: the step's tile",
             ha="center", va="top", fontsize=8, color="0.3")
    return fig


# --- Table 1: decomposition, fusion, signalling -------------------------------------------------------
def decomposed(grid: TileGrid, k: int) -> list[TileGrid]:
    """``grid``'s GEMM decomposed into ``k`` smaller GEMMs along M, as decomposition overlaps do: runs
    of whole tile rows (no padding) while ``k <= tiles_m``; ``k = tiles``: one GEMM per tile (the only
    tile-wise decomposition). Each keeps the tile shape and the CTA count."""
    if not 1 <= k <= grid.tiles_m and k != grid.num_tiles:
        raise ValueError(f"k must be in [1, {grid.tiles_m}] (runs of tile rows) or {grid.num_tiles} (one per tile)")
    if k == grid.num_tiles and k > grid.tiles_m:
        return [TileGrid.with_ctas(int(grid.tile_rows(t)), int(grid.tile_cols(t)), grid.ctas, BM=grid.BM, BN=grid.BN)
                for t in range(grid.num_tiles)]
    runs = np.array_split(np.arange(grid.tiles_m), k)
    out = []
    for r in runs:
        rows = min(grid.M, (r[-1] + 1) * grid.BM) - r[0] * grid.BM
        out.append(TileGrid.with_ctas(int(rows), grid.N, grid.ctas, BM=grid.BM, BN=grid.BN, order=grid.order,
                                      swizzle=grid.swizzle))
    return out


def design_comparison(grid: TileGrid, partition, ks=(2, 4), element_bytes: int = 2) -> pd.DataFrame:
    """Table 1 of the paper on one GEMM, one row per design. Numbers from the wave model of
    :class:`TileGrid`: GEMM launches, waves in all (the whole GEMM's is the floor), the mean fill
    of those waves (tiles / (waves x CTAs)), collectives per call and the smallest message. The
    three property columns are the paper's; the numbers show where they come from: a
    decomposition into ``k`` GEMMs pays each one's last partial wave (and a fresh launch), fusion
    sends tile-sized messages from inside one GEMM kernel written for one collective, signalling
    keeps the GEMM's waves and sends one slice per group with a stock collective."""
    from ..partition import validate_partition

    part = validate_partition(partition, grid.num_waves)
    tile_bytes = grid.BM * grid.BN * element_bytes
    rows = []

    def row(design, launches, waves, tiles, collectives, smallest, tile_wise, free, agnostic):
        rows.append({"design": design, "GEMM launches": launches, "waves": waves,
                     "wave fill": round(tiles / (waves * grid.ctas), 3), "collectives / call": collectives,
                     "smallest message (KiB)": round(smallest / 1024, 1), "tile-wise": tile_wise,
                     "interference-free": free, "communication-agnostic": agnostic})

    for k in ks:
        parts = decomposed(grid, k)
        name = "decomposition, one GEMM per tile" if k == grid.num_tiles > grid.tiles_m else f"decomposition, k={k}"
        smallest = min(p.M * p.N for p in parts) * element_bytes
        row(name, k, sum(p.num_waves for p in parts), sum(p.num_tiles for p in parts), k, smallest,
            "yes" if k == grid.num_tiles else "no", "no", "yes")
    row("fusion (comm per tile in the GEMM)", 1, grid.num_waves, grid.num_tiles, f"{grid.num_tiles} (in-kernel)",
        tile_bytes, "yes", "no", "no")
    sizes = np.diff(reorder.tile_reorder(grid, part).group_slices, axis=1).ravel()
    row(f"signalling, partition {list(part)}", 1, grid.num_waves, grid.num_tiles, len(part),
        int(sizes.min()) * element_bytes, "yes", "yes", "yes")
    return pd.DataFrame(rows)
