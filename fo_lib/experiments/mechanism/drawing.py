"""Drawing a trace: one step on one axes (:func:`draw_step`: output tiles, counting table, send
buffer), every step as PNG frames for the notebook's slider (:func:`step_images`) or as small
multiples (:func:`draw_trace`)."""
from __future__ import annotations

import numpy as np

from .trace import Trace


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


# A reader's screen: the saved figure (150 dpi, fo_lib.experiments.save) and each slider frame fit in
# this many pixels of height.
FRAME_MAX_PX = 1000


def rendered_size(fig, dpi: int = 150) -> tuple[int, int]:
    """``(width, height)`` in pixels of ``fig`` saved as the notebooks save it (PNG, tight box)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return Image.open(buf).size


def draw_trace(trace: Trace, *, world_size: int | None = None, columns: int = 5, panel=(3.2, 3.0)):
    """Every step of ``trace`` as small multiples (the static view of the slider); returns the figure.
    The default panel keeps two rows of the notebook's ten steps within :data:`FRAME_MAX_PX`."""
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
