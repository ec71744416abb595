"""Drawing one explorer view: tile map, timelines, design space."""
from __future__ import annotations

import numpy as np

from ... import partition as part_mod
from .compute import Explored, explore
from .errors import DESIGN_SPACE_MAX_WAVES
from .inputs import ExplorerInput


def new_figure():
    """A figure laid out for :func:`draw` (built once, redrawn in place by the widget)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 7.6))
    _layout(fig)
    return fig


def _layout(fig) -> None:
    # NOTES: fixed margins, not constrained layout: measuring every label to place the axes took
    # ~0.25 s of a ~0.5 s redraw.
    fig.clear()
    fig.subplot_mosaic([["tiles", "timeline"], ["space", "space"]], width_ratios=[1, 2.4], height_ratios=[1.3, 1],
                       gridspec_kw=dict(left=0.055, right=0.985, top=0.91, bottom=0.075, wspace=0.12, hspace=0.42))


def _group_edges(groups: np.ndarray):
    """Line segments between neighbouring tiles of different groups (imshow coordinates)."""
    segs = []
    ys, xs = np.nonzero(groups[:, 1:] != groups[:, :-1])
    segs += [((x + 0.5, y - 0.5), (x + 0.5, y + 0.5)) for y, x in zip(ys, xs)]
    ys, xs = np.nonzero(groups[1:, :] != groups[:-1, :])
    segs += [((x - 0.5, y + 0.5), (x + 0.5, y + 0.5)) for y, x in zip(ys, xs)]
    return segs


def _groups_cmap():
    import matplotlib

    return matplotlib.colormaps["viridis"]


def draw(r: Explored, fig=None):
    """Draw one view into ``fig`` (cleared; :func:`new_figure` when None) and return it: the tile ->
    wave map with the chosen partition's group boundaries (Fig. 6's counting groups), the predicted
    timelines (chosen, finest, no overlap) and the design space of Fig. 9 (every partition's
    predicted time, sorted)."""
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Patch

    if fig is None:
        fig = new_figure()
    axes = {ax.get_label(): ax for ax in fig.axes}
    if set(axes) != {"tiles", "timeline", "space"}:
        _layout(fig)
        axes = {ax.get_label(): ax for ax in fig.axes}
    for ax in axes.values():
        ax.clear()
    g, T = r.grid, r.num_waves
    inp = r.inp

    # Tile -> wave map, group boundaries of the chosen partition in white.
    ax = axes["tiles"]
    waves = g.tile_wave.reshape(g.tiles_m, g.tiles_n)
    group_of = part_mod.group_of_wave(r.chosen.partition)[waves]
    ax.imshow(waves, cmap="viridis", vmin=0, vmax=max(T - 1, 1), interpolation="nearest", aspect="auto")
    ax.add_collection(LineCollection(_group_edges(group_of), colors="w", linewidths=1.6))
    if g.num_tiles <= 96:
        for (y, x), w in np.ndenumerate(waves):
            ax.text(x, y, str(w), ha="center", va="center", fontsize=7, color="w" if w < T / 2 else "k")
    ax.set(xlabel=f"tile column ({g.tiles_n} x {g.BN})", ylabel=f"tile row ({g.tiles_m} x {g.BM})",
           title=f"tile -> wave: {g.num_tiles} tiles / {g.ctas} CTAs = {T} waves\n"
                 f"colour: wave 0 (dark) .. {T - 1} (yellow); white: {r.choice} groups "
                 f"{list(r.chosen.partition)}")
    ax.title.set_fontsize(9)

    # Timelines.
    ax = axes["timeline"]
    lanes = [(f"{r.choice} {list(r.chosen.partition)}", r.chosen), (f"finest ({T} groups)", r.finest),
             ("no overlap (all SMs)", r.no_overlap)]
    ticks, names = [], []
    # One colour per wave group along viridis (group g the same colour in every lane), where the
    # default cycle would repeat after ten groups.
    shade = _groups_cmap()
    colour = [shade(0.92 * k / max(T - 1, 1)) for k in range(T)]
    for i, (name, pred) in enumerate(lanes):
        y = 3 * (len(lanes) - 1 - i)
        colors = [colour[gt.group] for gt in pred.groups]
        ax.broken_barh([(gt.compute_start, gt.compute_end - gt.compute_start) for gt in pred.groups],
                       (y + 1.05, 0.85), facecolors=colors, edgecolor="k", linewidth=0.4, label=f"{name}: GEMM")
        ax.broken_barh([(gt.comm_start, gt.comm_end - gt.comm_start) for gt in pred.groups],
                       (y + 0.1, 0.85), facecolors=colors, edgecolor="k", linewidth=0.4, hatch="//",
                       label=f"{name}: collectives")
        ax.text(pred.total_ms, y + 0.5, f" {pred.total_ms:.3f} ms", va="center", fontsize=8)
        ax.text(0, y + 2.0, name, va="bottom", fontsize=8, weight="bold")
        ticks += [y + 0.5, y + 1.5]
        names += ["comm", "GEMM"]
    # The key: a few groups' colours (first to last) and the hatch of a collective, right of the lanes.
    shown = np.unique(np.linspace(0, T - 1, min(T, 8)).round().astype(int))
    key = [Patch(facecolor=colour[k], edgecolor="k", linewidth=0.4, label=f"group {k + 1}") for k in shown]
    key.append(Patch(facecolor="white", edgecolor="k", linewidth=0.4, hatch="//", label="its collective"))
    ax.legend(handles=key, loc="center right", fontsize=7, title="wave group", title_fontsize=7, frameon=False)
    ax.set_yticks(ticks, names, fontsize=7)
    ax.set_ylim(-0.2, 3 * len(lanes) - 0.2)
    ax.set_xlim(0, max(p.total_ms for _, p in lanes) * 1.4)
    ax.set_xlabel("ms (predicted)")
    ax.set_title(f"{inp.primitive} {inp.M}x{inp.N}x{inp.K} {inp.dtype}, {inp.tile}, {r.preset.label}, "
                 f"W={inp.world_size}, model '{inp.model}'\n{r.profile_source}", fontsize=8)

    # Design space (Fig. 9).
    ax = axes["space"]
    if r.design_ms is None:
        ax.text(0.5, 0.5, f"T = {T} waves: 2^{T - 1} partitions (the design space is drawn for T <= "
                          f"{DESIGN_SPACE_MAX_WAVES});\nthe exact DP chose {list(r.best.partition)}: "
                          f"{r.best.total_ms:.3f} ms", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        ax.set_axis_on()
        order = np.argsort(r.design_ms, kind="stable")
        ms = r.design_ms[order]
        ngroups = np.array([len(r.design_partitions[i]) for i in order])
        x = np.arange(ms.size)
        width_pt = ax.get_position().width * fig.get_figwidth() * 72  # one bar per partition, no gaps
        shade = _groups_cmap()
        segs = np.zeros((ms.size, 2, 2))
        segs[:, :, 0] = x[:, None]
        segs[:, 1, 1] = ms
        # One LineCollection from an array (ax.vlines goes through masked arrays: ~80 ms at T = 12).
        ax.add_collection(LineCollection(segs, colors=shade(0.92 * (ngroups - 1) / max(T - 1, 1)),
                                         antialiaseds=False, linewidths=min(12.0, 0.9 * width_pt / ms.size)),
                          autolim=False)
        rank = {p: k for k, p in enumerate(r.design_partitions[i] for i in order)}
        marks = [("best", r.best, "*", 14), ("finest", r.finest, "v", 8),
                 ("one group", r.one_group, "s", 7)]
        if r.choice == "typed":
            marks.append(("typed", r.chosen, "D", 8))
        for name, pred, marker, size in marks:
            k = rank[tuple(pred.partition)]
            ax.plot(k, pred.total_ms, marker, color="k", ms=size, label=f"{name} {list(pred.partition)}: "
                                                                        f"{pred.total_ms:.3f} ms")
        ax.axhline(r.no_overlap.total_ms, color="0.3", ls="--", lw=1,
                   label=f"no overlap: {r.no_overlap.total_ms:.3f} ms")
        lo = min(ms.min(), r.no_overlap.total_ms)
        hi = max(ms.max(), r.no_overlap.total_ms)
        ax.set_ylim(lo - 0.15 * (hi - lo) - 1e-9, hi + 0.5 * (hi - lo) + 1e-9)  # headroom for the legends
        ax.set_xlim(-1, ms.size)
        ax.set(xlabel=f"all 2^{T - 1} = {ms.size} partitions of {T} waves, sorted by predicted time "
                      f"(colour: number of groups)", ylabel="predicted ms (overlapped)")
        first = ax.legend(fontsize=7, loc="upper left", ncol=2)
        ax.add_artist(first)
        counts = sorted(set(ngroups.tolist()))
        ax.legend(handles=[Patch(color=shade(0.92 * (n - 1) / max(T - 1, 1)), label=str(n)) for n in counts],
                  title="groups", title_fontsize=7, fontsize=7, loc="upper right", ncol=min(len(counts), 6),
                  handlelength=1.0, columnspacing=0.8)
    ax.set_title("design space (Fig. 9): " + r.summary(), fontsize=9)
    return fig


def render_png(fig, dpi: int = 80) -> bytes:
    """The figure as PNG bytes (fast zlib level: encoding is then ~5 % of a redraw)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


def redraw(fig, inp: ExplorerInput | None = None, dpi: int = 80, **changes) -> tuple[Explored, bytes, dict]:
    """One widget update: :func:`explore`, :func:`draw`, PNG bytes, and how long each step took (s)."""
    import time

    t0 = time.perf_counter()
    r = explore(inp, **changes)
    t1 = time.perf_counter()
    draw(r, fig)
    png = render_png(fig, dpi)
    t2 = time.perf_counter()
    return r, png, {"compute_s": t1 - t0, "draw_s": t2 - t1, "total_s": t2 - t0}
