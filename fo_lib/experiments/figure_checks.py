"""Checks run on a matplotlib figure before :func:`fo_lib.experiments.common.save` writes it, so that a
figure a reader cannot read at a glance fails its notebook instead of reaching ``figures/``.

``save`` runs :func:`check` when the environment variable ``FO_FIGURE_CHECKS`` is ``1`` (the notebook
replays of the tests set it); otherwise nothing is checked, and importing this module costs nothing
(matplotlib is imported inside the functions). :func:`check` raises :class:`FigureDefect` listing
every defect found:

* overlapping text: tick labels, axis labels, titles, annotations, legend texts, figure texts;
* a number on an axis without a name: an axis holding data whose tick labels show numbers but that
  has no label. Images are not exempt (their ticks count rows and columns of something); an axis
  with its ticks removed, or ``axis("off")``, shows no number and needs no name, a shared axis whose
  tick labels are hidden is named by its neighbour, and tick labels that are words (the lanes of a
  timeline, the shapes of a bar chart) name themselves;
* an axes' legend box over its drawn data (line points and segments, bars, scatter points); a
  figure legend is placed outside the axes (``loc="outside ..."``) and not checked;
* two labelled series of one axes drawn alike: the same colour with the same line style and marker
  (lines) or hatch (bars). A shared colour with another line style is a deliberate pairing (measured
  solid, modelled dashed) that a reader tells apart;
* a tick label that is not an integer on an axis declared a count with :func:`count_axis`;
* several series in one axes and no legend, or a series without a legend entry (no label);
  :func:`colorbar_legend` declares a colour bar as the key (many ordered series, such as the wave
  groups of a timeline, read better on a colour scale).

Reference lines drawn across the axes (``axhline``/``axvline``) are not series: a reader sees them as
levels, and the axis names what they measure.
"""
from __future__ import annotations

import itertools

import numpy as np

TOLERANCE_PX = 1.5  # text boxes touching by antialiasing, not by glyphs
_COUNT = "_fo_count_axis"
_COLOUR_KEY = "_fo_colorbar_legend"


class FigureDefect(ValueError):
    """A figure a reader would misread; ``defects`` lists each one in words."""

    def __init__(self, defects):
        self.defects = list(defects)
        super().__init__("figure defects:\n  - " + "\n  - ".join(self.defects))


def count_axis(axis):
    """Declare ``axis`` (``ax.xaxis`` or ``ax.yaxis``) a count: ticks at integers only, and checked."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))
    setattr(axis, _COUNT, True)
    return axis


def discrete_colours(n: int, cmap="viridis"):
    """``n`` distinct colours in order along ``cmap`` (for series that have an order, such as wave
    groups in time), where the default cycle would repeat after ten."""
    import matplotlib as mpl

    return [mpl.colormaps[cmap](x) for x in (np.linspace(0, 1, n) if n > 1 else [0.0])]


def colorbar_legend(fig, ax, colours, first: int, label: str, **kw):
    """A colour bar beside ``ax`` (an Axes or a list of them) that is the key to its series' colours:
    one block per colour of ``colours``, numbered from ``first`` with integer ticks. Marks the axes
    as explained, for :func:`series_without_legend`."""
    import matplotlib as mpl
    from matplotlib.ticker import MaxNLocator

    n = len(colours)
    norm = mpl.colors.BoundaryNorm(np.arange(first - 0.5, first + n), n)
    sm = mpl.cm.ScalarMappable(norm=norm, cmap=mpl.colors.ListedColormap(colours))
    cbar = fig.colorbar(sm, ax=ax, label=label, **kw)
    # The colour bar keeps its own locator (an axis locator set on it is replaced at draw): fixed ticks.
    ticks = MaxNLocator(integer=True, nbins=min(n, 10)).tick_values(first, first + n - 1)
    cbar.set_ticks([t for t in ticks if first <= t <= first + n - 1])
    cbar.minorticks_off()
    setattr(cbar.ax.yaxis if cbar.orientation == "vertical" else cbar.ax.xaxis, _COUNT, True)
    for a in np.atleast_1d(ax).ravel():
        setattr(a, _COLOUR_KEY, True)
    return cbar


def check(fig) -> None:
    """Raise :class:`FigureDefect` naming every defect of ``fig``; return None when there is none."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas
    if not hasattr(canvas, "get_renderer"):  # a Figure made without pyplot: measure it on Agg
        FigureCanvasAgg(fig)
    try:
        fig.canvas.draw()  # tick labels and layouts are filled in by a draw
        renderer = fig.canvas.get_renderer()
        defects = overlapping_text(fig, renderer)
        for i, ax in enumerate(fig.axes):
            name = _axes_name(ax, i)
            defects += [f"{name}: {d}" for d in (unnamed_axes(ax) + legend_over_data(ax, renderer)
                                                   + repeated_colours(ax) + non_integer_counts(ax)
                                                   + series_without_legend(ax, fig))]
    finally:
        fig.set_canvas(canvas)
    if defects:
        raise FigureDefect(defects)


def _axes_name(ax, i):
    title = ax.get_title() or ax.get_title("left") or ax.get_ylabel()
    return f"axes {i}" + (f" ({title!r})" if title else "")


def _shown_ticks(axis):
    """The major and minor ticks drawn inside the view, with a visible non-empty label."""
    lo, hi = sorted(axis.get_view_interval())
    eps = (hi - lo) * 1e-9
    out = []
    for tick in itertools.chain(axis.get_major_ticks(), axis.get_minor_ticks()):
        loc = tick.get_loc()
        if loc is None or not lo - eps <= loc <= hi + eps:
            continue
        for label in (tick.label1, tick.label2):
            if label.get_visible() and tick.get_visible() and label.get_text().strip():
                out.append((loc, label))
    return out


def _texts(fig):
    texts = list(fig.texts)
    if fig._suptitle is not None:
        texts.append(fig._suptitle)
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison and not ax.texts:
            continue
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        if ax.axison:
            texts += [t for axis in (ax.xaxis, ax.yaxis) for _, t in _shown_ticks(axis)]
        if ax.get_legend() is not None:
            texts += _legend_texts(ax.get_legend())
    for legend in fig.legends:
        texts += _legend_texts(legend)
    unique = {id(t): t for t in texts}  # the suptitle is among fig.texts too
    return [t for t in unique.values() if t.get_visible() and t.get_text().strip()]


def _legend_texts(legend):
    return [*legend.get_texts(), legend.get_title()] if legend.get_visible() else []


def _corners(text, renderer):
    """The four corners of a text's (possibly rotated) box in display pixels. A rotated label's
    window extent is the upright box around it, which overlaps its neighbours' though the glyphs
    do not, so the rotated rectangle is rebuilt inside that box."""
    box = text.get_window_extent(renderer)
    angle = np.deg2rad(text.get_rotation() % 360)
    if np.isclose(np.sin(2 * angle), 0):  # 0, 90, 180, 270 degrees: the box is the rectangle
        return np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]])
    rotation = text.get_rotation()
    text.set_rotation(0)
    upright = text.get_window_extent(renderer)
    text.set_rotation(rotation)
    c, s = np.cos(angle), np.sin(angle)
    rect = np.array([[0, 0], [upright.width, 0], [upright.width, upright.height], [0, upright.height]])
    turned = rect @ np.array([[c, s], [-s, c]])
    return turned - turned.min(axis=0) + [box.x0, box.y0]


def _overlap_depth(p, q):
    """How deep two convex polygons overlap (0 if apart): the least overlap of their projections on
    the normals of their edges (separating axis theorem)."""
    depth = np.inf
    for poly in (p, q):
        edges = np.roll(poly, -1, axis=0) - poly
        for nx, ny in np.stack([-edges[:, 1], edges[:, 0]], axis=1):
            norm = np.hypot(nx, ny)
            if norm == 0:
                continue
            a, b = p @ [nx / norm, ny / norm], q @ [nx / norm, ny / norm]
            depth = min(depth, min(a.max(), b.max()) - max(a.min(), b.min()))
    return max(depth, 0.0)


def overlapping_text(fig, renderer):
    """Pairs of texts whose (rotated) boxes overlap by more than :data:`TOLERANCE_PX`."""
    boxes = [(t, _corners(t, renderer)) for t in _texts(fig)]
    found = []
    for (a, pa), (b, pb) in itertools.combinations(boxes, 2):
        if _overlap_depth(pa, pb) > TOLERANCE_PX:
            found.append(f"text {a.get_text()!r} overlaps text {b.get_text()!r}")
    return found


def _has_data(ax):
    return bool(ax.lines or ax.collections or ax.patches or ax.images or ax.containers)


def unnamed_axes(ax):
    if not ax.get_visible() or not ax.axison or not _has_data(ax):
        return []
    return [f"{which} axis shows numbers but has no label" for which, axis in (("x", ax.xaxis), ("y", ax.yaxis))
            if any(_is_number(t.get_text()) for _, t in _shown_ticks(axis)) and not axis.label.get_text().strip()]


def _is_number(text):
    """A tick label that reads as a number: 1.5, -2, 10^4 in mathtext, 1e+06, 50%."""
    cleaned = text.replace("\u2212", "-").replace("$", "").replace("\\mathdefault", "").strip("{}% ")
    cleaned = cleaned.replace("{", "").replace("}", "").replace("^", "e")
    try:
        float(cleaned)
    except ValueError:
        return False
    return True


def _is_reference(line, ax):
    """axhline/axvline: drawn in a transform with an axes-relative coordinate."""
    return line.get_transform() != ax.transData


def _series(ax):
    """(label, artist or container, style key) for each data series of ``ax``: bar and errorbar
    containers, lines that are not reference lines, scatter and filled collections."""
    from matplotlib.collections import LineCollection, PathCollection, PolyCollection
    from matplotlib.colors import to_hex

    owned, out = set(), []
    for c in ax.containers:
        children = [a for a in c.get_children() if a is not None]
        owned.update(map(id, children))
        if c.__class__.__name__ == "BarContainer" and getattr(c, "errorbar", None) is not None:
            owned.update(id(a) for a in c.errorbar.get_children() if a is not None)
        first = children[0] if children else None
        if first is None:
            continue
        colour = first.get_facecolor() if hasattr(first, "get_facecolor") else first.get_color()
        if c.__class__.__name__ == "ErrorbarContainer":
            colour = first.get_color()
        hatch = first.get_hatch() if hasattr(first, "get_hatch") else None
        out.append((c.get_label(), c, (to_hex(colour, keep_alpha=True), hatch)))
    for line in ax.lines:
        if id(line) in owned or _is_reference(line, ax) or not line.get_visible():
            continue
        out.append((line.get_label(), line, (to_hex(line.get_color(), keep_alpha=True), line.get_linestyle(),
                                              line.get_marker())))
    for coll in ax.collections:
        if id(coll) in owned or not coll.get_visible():
            continue
        if isinstance(coll, (PathCollection, PolyCollection)) and not isinstance(coll, LineCollection):
            fc = coll.get_facecolor()
            colour = to_hex(fc[0], keep_alpha=True) if len(fc) == 1 else None
            out.append((coll.get_label(), coll, (colour, coll.get_hatch())))  # a hatch tells series apart
    return out


def _labelled(label):
    return bool(label) and not str(label).startswith("_")


def repeated_colours(ax):
    seen, found = {}, []
    for label, _, key in _series(ax):
        if not _labelled(label) or key[0] is None:
            continue
        if key in seen and seen[key] != label:
            found.append(f"series {seen[key]!r} and {label!r} share the colour {key[0]}")
        seen.setdefault(key, label)
    return found


def _in_legend(artist, legends):
    handles = {id(h) for leg in legends for h in getattr(leg, "legend_handles", leg.legendHandles)}
    return id(artist) in handles


def series_without_legend(ax, fig):
    # A diagram (axes off: no scale to read values on) names its parts with text beside them.
    series = _series(ax)
    if len(series) < 2 or getattr(ax, _COLOUR_KEY, False) or not ax.axison:
        return []
    legends = [leg for leg in [ax.get_legend(), *fig.legends] if leg is not None]
    if not legends:
        return [f"{len(series)} series and no legend"]
    # A legend entry is drawn from the series' label; a series without one is unexplained.
    unnamed = [a for label, a, _ in series if not _labelled(label)]
    return [f"{len(unnamed)} of {len(series)} series have no legend entry"] if unnamed else []


def _points(artist, ax):
    """Display coordinates of what a line or scatter draws inside the axes (segments sampled)."""
    from matplotlib.lines import Line2D

    if isinstance(artist, Line2D):
        xy = np.asarray(artist.get_xydata(), float)
        if artist.get_linestyle() not in ("None", "", " ") and len(xy) > 1:
            t = np.linspace(0, 1, 16)[:, None, None]
            xy = (xy[:-1] + t * (xy[1:] - xy[:-1])).reshape(-1, 2)
        pts = ax.transData.transform(xy)
    else:
        pts = artist.get_offset_transform().transform(np.asarray(artist.get_offsets(), float))
    pts = pts[np.isfinite(pts).all(axis=1)]
    inside = ax.bbox
    keep = (pts[:, 0] >= inside.x0) & (pts[:, 0] <= inside.x1) & (pts[:, 1] >= inside.y0) & (pts[:, 1] <= inside.y1)
    return pts[keep]


def legend_over_data(ax, renderer):
    from matplotlib.patches import Rectangle

    legend = ax.get_legend()
    if legend is None or not legend.get_visible():
        return []
    box = legend.get_window_extent(renderer)
    hits = 0
    for line in ax.lines:
        if line.get_visible() and not _is_reference(line, ax):
            p = _points(line, ax)
            hits += int(((p[:, 0] > box.x0) & (p[:, 0] < box.x1) & (p[:, 1] > box.y0) & (p[:, 1] < box.y1)).any())
    from matplotlib.collections import PathCollection

    for coll in ax.collections:
        if isinstance(coll, PathCollection) and coll.get_visible() and len(coll.get_offsets()):
            p = _points(coll, ax)
            hits += int(((p[:, 0] > box.x0) & (p[:, 0] < box.x1) & (p[:, 1] > box.y0) & (p[:, 1] < box.y1)).any())
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_visible() and patch.get_width() and patch.get_height():
            pb = patch.get_window_extent(renderer)
            w = min(pb.x1, box.x1) - max(pb.x0, box.x0)
            h = min(pb.y1, box.y1) - max(pb.y0, box.y0)
            hits += int(w > TOLERANCE_PX and h > TOLERANCE_PX)
    return [f"the legend covers {hits} drawn series or bars"] if hits else []


def non_integer_counts(ax):
    found = []
    for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        if not getattr(axis, _COUNT, False):
            continue
        bad = [label.get_text() for loc, label in _shown_ticks(axis) if abs(loc - round(loc)) > 1e-9]
        if bad:
            found.append(f"{which} axis counts but shows tick labels {bad}")
    return found
