"""Drawing one measure over the model: the stamped tile finish times over the modelled waves, and the
measured call over the predicted timeline, each pair on shared axes."""
from __future__ import annotations

import numpy as np

from .measure import Measured


def new_measured_figure():
    """A figure laid out for :func:`draw_measured` (the explorer's width: 13 in)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 4.4))
    _layout(fig)
    return fig


def _layout(fig) -> None:
    fig.clear()
    fig.subplot_mosaic([["waves", "calls"]], width_ratios=[1, 1.5],
                       gridspec_kw=dict(left=0.06, right=0.985, top=0.8, bottom=0.12, wspace=0.22))


def draw_measured(m: Measured, fig=None):
    """Draw ``m`` into ``fig`` (:func:`new_measured_figure` when None) and return it. Left: per tile,
    its schedule index against its stamped finish time (dots) over the modelled waves (boxes: wave
    ``w`` holds schedule indices ``[w * CTAs, (w + 1) * CTAs)`` and lasts the profile's wave time).
    Right: the timeline predicted on what was measured here (:attr:`Measured.predicted`: GEMM per
    group, each group's collective) above the measured call
    (GEMM, each group's collective from its wait's return, the post-reorder), on one ms axis."""
    from matplotlib.patches import Rectangle

    if fig is None:
        fig = new_measured_figure()
    axes = {ax.get_label(): ax for ax in fig.axes}
    if set(axes) != {"waves", "calls"}:
        _layout(fig)
        axes = {ax.get_label(): ax for ax in fig.axes}
    for ax in axes.values():
        ax.clear()
    r = m.explored
    g = r.grid

    ax = axes["waves"]
    ends = m.model_wave_end_ms
    starts = np.concatenate([[0.0], ends[:-1]])
    for w, (s, e) in enumerate(zip(starts, ends)):
        lo, hi = w * g.ctas, min((w + 1) * g.ctas, g.num_tiles)
        ax.add_patch(Rectangle((s, lo), e - s, hi - lo, facecolor=f"C{w % 10}", alpha=0.25, edgecolor=f"C{w % 10}"))
    ax.plot(m.tile_end_ms, g.schedule_index, ".", color="k", ms=2.5, label="tile finish (stamped)")
    ax.plot([], [], "s", color="C0", alpha=0.4, label="modelled waves")
    ax.set_xlim(0, max(ends[-1], m.tile_end_ms.max()) * 1.05)
    ax.set_ylim(0, g.num_tiles)
    ax.legend(fontsize=7, loc="lower right")
    ax.set(xlabel="ms from the first tile's start", ylabel=f"schedule index ({g.ctas} CTAs per wave)")
    ax.set_title(f"{g.num_tiles} tiles in {g.num_waves} waves: last tile {m.tile_end_ms.max():.3f} ms measured, "
                 f"{ends[-1]:.3f} ms modelled", fontsize=8)

    ax = axes["calls"]
    pred = m.predicted
    lanes = [("predicted GEMM", [(gt.compute_start, gt.compute_end, gt.group) for gt in pred.groups], None),
             ("predicted comm", [(gt.comm_start, gt.comm_end, gt.group) for gt in pred.groups], "//"),
             ("measured GEMM", [(s["start_ms"], s["end_ms"], -1) for s in m.spans if s["span"] == "gemm"], None),
             ("measured comm", [(s["start_ms"], s["end_ms"], s["group"]) for s in m.spans if s["span"] == "group"],
              "//"),
             ("post-reorder", [(s["start_ms"], s["end_ms"], -1) for s in m.spans if s["span"] == "post"], None)]
    for y, (_, bars, hatch) in enumerate(lanes):
        for start, end, group in bars:
            ax.barh(y, end - start, left=start, height=0.7, color="0.6" if group < 0 else f"C{int(group) % 10}",
                    edgecolor="k", lw=0.4, hatch=hatch)
    from ..figure_checks import colorbar_legend
    colorbar_legend(fig, ax, [f"C{g % 10}" for g in range(len(pred.partition))], 1, "wave group", pad=0.01,
                    aspect=12)
    for total, y, what in ((m.predicted_ms, 1, "predicted"), (m.measured_ms, 4, "measured")):
        ax.axvline(total, color="k", ls="--", lw=0.8)
        ax.text(total, y, f" {what} {total:.3f} ms", va="center", fontsize=8)
    ax.set_yticks(range(len(lanes)), [name for name, _, _ in lanes], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(m.measured_ms, m.predicted_ms) * 1.3)
    ax.set_xlabel("ms from the GEMM's start (colour: wave group)")
    ax.set_title(f"partition {list(pred.partition)}: measured {m.measured_ms:.3f} ms, predicted "
                 f"{m.predicted_ms:.3f} ms, difference {m.difference_ms:+.3f} ms "
                 f"({100 * m.difference_ms / m.predicted_ms:+.1f} %)\npredicted on the stamped waves and the link timed "
                 f"here (link '{r.inp.link}' predicts {m.view_predicted_ms:.3f} ms)", fontsize=8)
    fig.suptitle(f"measured on the {m.device}, emulated link (dots and lower lanes) against the model: {r.inp.primitive} {r.inp.M}x{r.inp.N}x{r.inp.K} {r.inp.dtype}, "
                 f"{r.inp.tile}", fontsize=9)
    return fig
