"""The ipywidgets front of the explorer (imported only by the notebook)."""
from __future__ import annotations

from ...gemm import DTYPES
from ...predictor import MODELS
from ...tiling import RASTER_ORDERS
from .draw import new_figure, redraw
from .errors import PARTITION_CHOICES, TILE_CONFIGS, ExplorerError
from .inputs import ExplorerInput, resolve
from .links import presets


def widget(inp: ExplorerInput | None = None, dpi: int = 80):
    """ipywidgets controls for every :class:`ExplorerInput` field, redrawing one figure (an
    ``ipywidgets.Image``) on each change. Returns the ``VBox``; ``.controls`` (field -> widget),
    ``.image``, ``.summary`` and ``.status`` are attached for tests and for the browser test's CSS
    classes (``fo-explorer-image``, ``fo-explorer-summary``, ``fo-control-<field>``)."""
    import ipywidgets as w

    inp, preset = resolve(inp)
    fig = new_figure()
    style = {"description_width": "90px"}
    lay = w.Layout(width="300px")

    def slider(name, lo, hi, step, value):
        return w.IntSlider(value=value, min=lo, max=hi, step=step, description=name, continuous_update=False,
                           style=style, layout=lay)

    c = {
        "M": slider("M", 128, 32768, 128, inp.M),
        "N": slider("N", 128, 32768, 128, inp.N),
        "K": slider("K", 256, 32768, 256, inp.K),
        "dtype": w.Dropdown(options=list(DTYPES), value=inp.dtype, description="dtype", style=style, layout=lay),
        "tile": w.Dropdown(options=list(TILE_CONFIGS), value=inp.tile, description="tile config", style=style,
                           layout=lay),
        "sm_count": slider("SMs", 16, 192, 1, inp.sm_count),
        "comm_sms": slider("comm SMs", 0, 64, 1, inp.comm_sms),
        "order": w.Dropdown(options=list(RASTER_ORDERS), value=inp.order, description="raster", style=style,
                            layout=lay),
        "swizzle": w.Dropdown(options=[1, 2, 4, 8, 16], value=inp.swizzle, description="swizzle", style=style,
                              layout=lay),
        "link": w.Dropdown(options=[(p.label, k) for k, p in presets().items()], value=inp.link,
                           description="link", style=style, layout=w.Layout(width="620px")),
        "primitive": w.Dropdown(options=list(preset.primitives), value=inp.primitive, description="collective",
                                style=style, layout=lay),
        "world_size": slider("world size", 2, 16, 1, inp.world_size),
        "partition": w.Combobox(options=list(PARTITION_CHOICES), value=str(inp.partition), ensure_option=False,
                                continuous_update=False, description="partition",
                                placeholder="tuned / finest / one group / 1,2,2", style=style, layout=lay),
        "model": w.Dropdown(options=list(MODELS), value=inp.model, description="model", style=style, layout=lay),
    }
    c["world_size"].disabled = preset.measured
    image = w.Image(format="png")
    summary = w.HTML()
    status = w.HTML()
    for name, ctl in c.items():
        ctl.add_class(f"fo-control-{name}")
    image.add_class("fo-explorer-image")
    summary.add_class("fo-explorer-summary")
    status.add_class("fo-explorer-status")
    busy = {"hold": False}

    def current() -> ExplorerInput:
        return ExplorerInput(**{name: ctl.value for name, ctl in c.items()})

    def update(_=None):
        if busy["hold"]:
            return
        try:
            r, png, t = redraw(fig, current(), dpi)
        except ExplorerError as exc:
            status.value = f"<span style='color:#b00'>input error: {exc}</span>"
            return
        image.value = png
        summary.value = f"<b>{r.summary()}</b>"
        status.value = (f"<span style='color:#555'>{r.profile_source}; redraw {1e3 * t['total_s']:.0f} ms "
                        f"(compute {1e3 * t['compute_s']:.0f} ms)</span>")

    def on_link(change):
        p = presets()[change["new"]]
        busy["hold"] = True  # one redraw for the preset's defaults, not one per control
        try:
            c["primitive"].options = list(p.primitives)
            prim = c["primitive"].value if c["primitive"].value in p.primitives else p.primitives[0]
            c["primitive"].value = prim
            c["sm_count"].value = p.sm_count
            c["comm_sms"].value = p.default_comm_sms(prim)
            c["world_size"].value = p.world_size
            c["world_size"].disabled = p.measured
            if p.gpu is not None and not p.gpu.hopper and c["tile"].value.startswith("sm90"):
                c["tile"].value = "portable 128x256x32"  # fits the 99-164 KB of shared memory of sm_80/86/89
        finally:
            busy["hold"] = False
        update()

    def on_primitive(change):
        if not busy["hold"]:
            busy["hold"] = True
            try:
                c["comm_sms"].value = presets()[c["link"].value].default_comm_sms(change["new"])
            finally:
                busy["hold"] = False
            update()

    c["link"].observe(on_link, names="value")
    c["primitive"].observe(on_primitive, names="value")
    for name, ctl in c.items():
        if name not in ("link", "primitive"):
            ctl.observe(update, names="value")
    update()
    rows = [w.HBox([c["M"], c["N"], c["K"], c["dtype"]]),
            w.HBox([c["tile"], c["order"], c["swizzle"], c["model"]]),
            w.HBox([c["sm_count"], c["comm_sms"], c["world_size"], c["partition"]]),
            w.HBox([c["link"], c["primitive"]])]
    box = w.VBox(rows + [summary, status, image])
    box.controls, box.image, box.summary, box.status, box.figure = c, image, summary, status, fig
    return box
