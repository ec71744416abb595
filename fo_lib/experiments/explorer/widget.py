"""The ipywidgets front of the explorer (imported only by the notebook)."""
from __future__ import annotations

from ...gemm import DTYPES
from ...predictor import MODELS
from ...tiling import RASTER_ORDERS
from .draw import new_figure, redraw, render_png
from .errors import PARTITION_CHOICES, TILE_CONFIGS, ExplorerError
from .inputs import ExplorerInput, parse_dim, resolve
from .links import presets

DIMS = {"M": (128, 32768, 128), "N": (128, 32768, 128), "K": (256, 32768, 256)}  # slider range and step


def _one_line(exc: BaseException) -> str:
    """An exception as one line of text for the widget (its type and the message's first line)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if not isinstance(exc, ExplorerError) else first


def widget(inp: ExplorerInput | None = None, dpi: int = 80, measurer=None):
    """ipywidgets controls for every :class:`ExplorerInput` field, redrawing one figure (an
    ``ipywidgets.Image``, above the controls, the window's width) on each change. M, N and K each have
    a slider and a text box kept in sync; typed text is exact (a value off the slider's grid stays
    as typed) and bad text shows one line in the status. "measure on GPU" runs the shown view through
    ``measurer`` (default :func:`~fo_lib.experiments.explorer.measure.default_measurer`) and draws it
    below; where it cannot run it is disabled with the reason beside it. Returns the ``VBox``;
    ``.controls`` (field -> widget; M, N, K: their text boxes), ``.sliders``, ``.image``, ``.summary``,
    ``.status``, ``.measure_button``, ``.measure_reason``, ``.measured_image`` and
    ``.measured_summary`` are attached for tests and for the browser test's CSS classes
    (``fo-explorer-<part>``, ``fo-control-<field>``, ``fo-slider-<field>``)."""
    import ipywidgets as w

    from .draw_measured import draw_measured, new_measured_figure
    from .measure import default_measurer

    measurer = measurer if measurer is not None else default_measurer()
    inp, preset = resolve(inp)
    fig, measured_fig = new_figure(), None
    style = {"description_width": "90px"}
    lay = w.Layout(width="300px")

    def slider(name, lo, hi, step, value):
        return w.IntSlider(value=value, min=lo, max=hi, step=step, description=name, continuous_update=False,
                           style=style, layout=lay)

    sliders = {d: w.IntSlider(value=min(max(getattr(inp, d), lo), hi), min=lo, max=hi, step=step, description=d,
                              continuous_update=False, readout=False, style={"description_width": "20px"},
                              layout=w.Layout(width="230px"))
               for d, (lo, hi, step) in DIMS.items()}
    c = {d: w.Text(value=str(getattr(inp, d)), continuous_update=False, layout=w.Layout(width="90px"))
         for d in DIMS}
    c |= {
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
    # The figures take the output's width (the PNG is 13 in x dpi: about 1040 px at dpi 80), never
    # more: a fixed minimum would clip the figure's right edge beside JupyterLab's file browser.
    image = w.Image(format="png", layout=w.Layout(width="100%", max_width="1300px"))
    measured_image = w.Image(format="png", layout=w.Layout(width="100%", max_width="1300px", display="none"))
    summary, status, measured_summary = w.HTML(), w.HTML(), w.HTML()
    button = w.Button(description="measure on GPU", icon="play", layout=w.Layout(width="160px"))
    reason = w.HTML()
    parts = {"image": image, "summary": summary, "status": status, "measure": button, "measure-reason": reason,
             "measured-image": measured_image, "measured-summary": measured_summary}
    for name, part in parts.items():
        part.add_class(f"fo-explorer-{name}")
    for name, ctl in c.items():
        ctl.add_class(f"fo-control-{name}")
    for name, ctl in sliders.items():
        ctl.add_class(f"fo-slider-{name}")
    state = {"hold": False, "view": None}

    def held(fn):
        """Run ``fn`` with the controls' observers quiet (one redraw for several changes)."""
        state["hold"] = True
        try:
            fn()
        finally:
            state["hold"] = False

    def current() -> ExplorerInput:
        values = {name: ctl.value for name, ctl in c.items()}
        values |= {d: parse_dim(d, c[d].value) for d in DIMS}
        return ExplorerInput(**values)

    def set_measure_state(r) -> None:
        why = measurer.problem(r) if r is not None else "no view to measure: fix the input first"
        button.disabled = why is not None
        button.tooltip = why or "run the shown view on this GPU"
        reason.value = f"<span style='color:#a60'>{why}</span>" if why else ""

    def update(_=None):
        if state["hold"]:
            return
        try:
            r, png, t = redraw(fig, current(), dpi)
        except ExplorerError as exc:
            status.value = f"<span style='color:#b00'>input error: {_one_line(exc)}</span>"
            return
        for d in DIMS:  # a typed value, echoed as the integer it was read as
            held(lambda d=d: setattr(c[d], "value", str(getattr(r.inp, d))))
        state["view"] = r
        image.value = png
        summary.value = f"<b>{r.summary()}</b>"
        status.value = (f"<span style='color:#555'>{r.profile_source}; redraw {1e3 * t['total_s']:.0f} ms "
                        f"(compute {1e3 * t['compute_s']:.0f} ms)</span>")
        measured_image.layout.display = "none"  # a measure of another view would mislead
        measured_summary.value = ""
        set_measure_state(r)

    def on_slider(change, d):
        if not state["hold"]:
            c[d].value = str(change["new"])  # the text box's observer redraws

    def on_text(change, d):
        try:
            value = parse_dim(d, change["new"])
        except ExplorerError:
            return update()  # shows the message
        lo, hi, _ = DIMS[d]
        held(lambda: setattr(sliders[d], "value", min(max(value, lo), hi)))
        update()

    def on_link(change):
        p = presets()[change["new"]]

        def apply():
            c["primitive"].options = list(p.primitives)
            prim = c["primitive"].value if c["primitive"].value in p.primitives else p.primitives[0]
            c["primitive"].value = prim
            c["sm_count"].value = p.sm_count
            c["comm_sms"].value = p.default_comm_sms(prim)
            c["world_size"].value = p.world_size
            c["world_size"].disabled = p.measured
            if p.gpu is not None and not p.gpu.hopper and c["tile"].value.startswith("sm90"):
                c["tile"].value = "portable 128x256x32"  # fits the 99-164 KB of shared memory of sm_80/86/89
        held(apply)
        update()

    def on_primitive(change):
        if not state["hold"]:
            held(lambda: setattr(c["comm_sms"], "value", presets()[c["link"].value].default_comm_sms(change["new"])))
            update()

    def on_measure(_=None):
        nonlocal measured_fig
        r = state["view"]
        button.disabled = True
        try:
            m = measurer.measure(r, progress=lambda text: setattr(reason, "value", f"<i>{text} ...</i>"))
            measured_fig = draw_measured(m, measured_fig or new_measured_figure())
            measured_image.value = render_png(measured_fig, dpi)
            measured_image.layout.display = None
            measured_summary.value = f"<b>{m.summary()}</b>"
            reason.value = ""
        except Exception as exc:  # noqa: BLE001 - shown in one line; the explorer stays usable
            reason.value = f"<span style='color:#b00'>measure failed: {_one_line(exc)}</span>"
        finally:
            button.disabled = measurer.problem(r) is not None

    for d in DIMS:
        sliders[d].observe(lambda ch, d=d: on_slider(ch, d), names="value")
        c[d].observe(lambda ch, d=d: on_text(ch, d), names="value")
    c["link"].observe(on_link, names="value")
    c["primitive"].observe(on_primitive, names="value")
    for name, ctl in c.items():
        if name not in ("link", "primitive", *DIMS):
            ctl.observe(update, names="value")
    button.on_click(on_measure)
    set_measure_state(None)  # until a view draws: disabled, not a click on nothing
    update()
    dims = [w.HBox([sliders[d], c[d]], layout=w.Layout(margin="0 16px 0 0")) for d in DIMS]
    rows = [w.HBox(dims + [c["dtype"]]),
            w.HBox([c["tile"], c["order"], c["swizzle"], c["model"]]),
            w.HBox([c["sm_count"], c["comm_sms"], c["world_size"], c["partition"]]),
            w.HBox([c["link"], c["primitive"]])]
    box = w.VBox([summary, image, *rows, status, w.HBox([button, reason]), measured_summary, measured_image])
    box.controls, box.sliders, box.image, box.summary, box.status, box.figure = c, sliders, image, summary, status, fig
    box.measure_button, box.measure_reason = button, reason
    box.measured_image, box.measured_summary = measured_image, measured_summary
    return box
