"""Each figure check catches a figure drawn with its defect and passes the same figure drawn well; save
runs the checks only when FO_FIGURE_CHECKS=1."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fo_lib.experiments import common, figure_checks as fc  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def defects(fig):
    try:
        fc.check(fig)
    except fc.FigureDefect as exc:
        return exc.defects
    return []


def labelled(ax, x="x (units)", y="y (units)"):
    ax.set(xlabel=x, ylabel=y)
    return ax


def test_a_good_figure_passes():
    fig, ax = plt.subplots()
    labelled(ax).plot([0, 1, 2], [0, 1, 4], label="square")
    ax.plot([0, 1, 2], [0, 1, 2], label="line")
    ax.legend(loc="upper left")
    assert defects(fig) == []


def test_figure_defect_is_a_value_error_listing_every_defect():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ax.plot([0, 1], [1, 0])
    with pytest.raises(ValueError) as err:
        fc.check(fig)
    assert isinstance(err.value, fc.FigureDefect)
    assert len(err.value.defects) == 3  # no x label, no y label, two series and no legend
    assert all(d in str(err.value) for d in err.value.defects)


def test_overlapping_text_is_caught():
    fig, ax = plt.subplots(figsize=(3, 3))
    labelled(ax).plot([0, 1], [0, 1])
    ax.text(0.5, 0.5, "first note")
    ax.text(0.52, 0.5, "second note")
    assert any("'first note' overlaps text 'second note'" in d for d in defects(fig))


def test_crowded_tick_labels_are_caught_and_rotated_or_spaced_ones_pass():
    names = [f"{m}x8192x16384" for m in range(1000, 13000, 1000)]
    fig, ax = plt.subplots(figsize=(4, 3))
    labelled(ax).bar(range(len(names)), np.arange(len(names)))
    ax.set_xticks(range(len(names)), names)
    assert any("overlaps" in d for d in defects(fig))
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
    assert defects(fig) == []


def test_rotated_labels_are_compared_as_rotated_boxes():
    """At 60 degrees the upright boxes around neighbouring labels overlap though the labels do not."""
    names = [f"{m}x8192x16384" for m in range(1000, 9000, 1000)]
    fig, ax = plt.subplots(figsize=(4, 3))
    labelled(ax).bar(range(len(names)), np.arange(len(names)))
    ax.set_xticks(range(len(names)), names, rotation=60, fontsize=6)
    fig.canvas.draw()
    boxes = [t.get_window_extent() for t in ax.get_xticklabels()]
    assert boxes[0].overlaps(boxes[1])
    assert defects(fig) == []
    ax.set_xticks(range(len(names)), names, rotation=10, fontsize=9)  # nearly flat: they collide
    assert any("overlaps" in d for d in defects(fig))


def test_hidden_and_empty_texts_are_ignored():
    fig, ax = plt.subplots(figsize=(3, 3))
    labelled(ax).plot([0, 1], [0, 1])
    ax.text(0.5, 0.5, "shown")
    ax.text(0.5, 0.5, "hidden").set_visible(False)
    ax.text(0.5, 0.5, "  ")
    assert defects(fig) == []


def test_an_axis_without_a_label_is_caught():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ax.set_ylabel("latency (ms)")
    assert defects(fig) == ["axes 0 ('latency (ms)'): x axis shows numbers but has no label"]


def test_axes_that_show_no_numbers_need_no_label():
    fig, (off, bare, img) = plt.subplots(1, 3)
    off.plot([0, 1], [0, 1])
    off.axis("off")
    bare.plot([0, 1], [0, 1])
    bare.set(xticks=[], yticks=[])
    img.imshow(np.eye(3))
    img.set(xlabel="column", ylabel="row")
    assert defects(fig) == []


def test_tick_labels_that_are_words_name_themselves():
    fig, ax = plt.subplots()
    ax.barh([0, 1], [3, 4])
    ax.set_yticks([0, 1], ["GEMM", "collective"])
    ax.set_xlabel("ms")
    assert defects(fig) == []


def test_log_scale_numbers_need_a_label():
    fig, ax = plt.subplots()
    ax.plot([10, 1000, 100000], [1, 2, 3])
    ax.set(xscale="log", ylabel="y (units)")
    assert defects(fig) == ["axes 0 ('y (units)'): x axis shows numbers but has no label"]


def test_an_image_with_numbered_axes_needs_labels():
    fig, ax = plt.subplots()
    ax.imshow(np.eye(3))
    assert len(defects(fig)) == 2


def test_shared_axes_are_named_by_their_neighbour():
    fig, axes = plt.subplots(1, 2, sharey=True)
    for ax in axes:
        ax.plot([0, 1], [0, 1])
        ax.set_xlabel("x (units)")
    axes[0].set_ylabel("y (units)")
    assert defects(fig) == []


def test_a_legend_over_bars_is_caught_and_one_beside_them_passes():
    fig, ax = plt.subplots()
    labelled(ax).bar([0, 1, 2], [1, 1, 1], label="a")
    ax.bar([0.3, 1.3, 2.3], [1, 1, 1], 0.3, label="b")
    ax.legend(loc="upper left")
    assert any("legend covers" in d for d in defects(fig))
    ax.set_ylim(0, 1.6)
    assert defects(fig) == []


def test_a_legend_over_a_line_or_scatter_points_is_caught():
    fig, (lines, dots) = plt.subplots(1, 2)
    x = np.linspace(0, 1, 5)
    labelled(lines).plot(x, np.ones_like(x), label="flat")
    lines.plot(x, x, label="rising")
    lines.legend(loc="center")
    labelled(dots).scatter([0.5], [0.5], label="centre")
    dots.scatter([0.1, 0.9], [0.9, 0.1], label="corners")
    dots.legend(loc="center")
    found = defects(fig)
    assert sum("legend covers" in d for d in found) == 2, found


def test_repeated_colours_are_caught():
    fig, ax = plt.subplots()
    labelled(ax)
    for i in range(11):  # the default cycle has ten colours
        ax.plot([0, 1], [i, i + 1], label=f"series {i}")
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
    assert any("'series 0' and 'series 10' share the colour" in d for d in defects(fig))


def test_one_colour_in_two_line_styles_is_told_apart():
    fig, ax = plt.subplots()
    labelled(ax).plot([0, 1], [0, 1], "-", color="C0", label="measured")
    ax.plot([0, 1], [0.2, 1.2], "--", color="C0", label="model")
    ax.legend(loc="lower right")
    assert defects(fig) == []
    ax.plot([0, 1], [0.5, 0.7], "-", color="C0", label="again measured")
    assert any("share the colour" in d for d in defects(fig))


def test_a_colour_map_gives_distinct_colours():
    fig, ax = plt.subplots()
    labelled(ax)
    colours = plt.get_cmap("viridis")(np.linspace(0, 1, 11))
    for i, c in enumerate(colours):
        ax.plot([0, 1], [i, i + 1], color=c, label=f"series {i}")
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
    assert defects(fig) == []


def test_half_integer_ticks_on_a_count_axis_are_caught():
    fig, ax = plt.subplots()
    labelled(ax, x="groups").plot([1, 2, 3], [3, 1, 2], "o")
    fc.count_axis(ax.xaxis)
    ax.set_xticks([1, 1.5, 2, 2.5, 3])  # a fixed locator replaces the integer one
    assert any("x axis counts" in d and "1.5" in d for d in defects(fig))


def test_count_axis_sets_integer_ticks():
    fig, ax = plt.subplots()
    labelled(ax, x="groups").plot([1, 2, 3], [3, 1, 2], "o")
    assert len(ax.get_xticks()) and not all(float(t).is_integer() for t in ax.get_xticks())
    fc.count_axis(ax.xaxis)
    assert defects(fig) == []


def test_several_series_without_legend_are_caught():
    fig, ax = plt.subplots()
    labelled(ax).bar([0, 1], [1, 2])
    ax.bar([0.4, 1.4], [2, 1])
    assert defects(fig) == ["axes 0 ('y (units)'): 2 series and no legend"]


def test_a_diagram_names_its_parts_with_text_and_needs_no_legend():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 0], color="C0")
    ax.plot([1, 2], [0, 0], color="C1")
    ax.text(0.5, 0.1, "slice 1")
    ax.text(1.5, 0.1, "slice 2")
    ax.axis("off")
    assert defects(fig) == []
    ax.axis("on")  # the same lines on a scale: a plot, whose series need a legend
    labelled(ax)
    assert defects(fig) == ["axes 0 ('y (units)'): 2 series and no legend"]


def test_a_series_left_out_of_the_legend_is_caught():
    fig, ax = plt.subplots()
    labelled(ax).plot([0, 1], [0, 1], label="named")
    ax.plot([0, 1], [1, 0])
    ax.legend(loc="center left", bbox_to_anchor=(1, 0.5))
    assert defects(fig) == ["axes 0 ('y (units)'): 1 of 2 series have no legend entry"]


def test_one_series_and_reference_lines_need_no_legend():
    fig, ax = plt.subplots()
    labelled(ax).plot([0, 1], [0, 1])
    ax.axhline(0.5, color="k")
    assert defects(fig) == []


def test_a_colorbar_legend_explains_many_series():
    fig, ax = plt.subplots()
    labelled(ax)
    colours = fc.discrete_colours(21)
    assert len({tuple(c) for c in colours}) == 21
    for g, c in enumerate(colours):
        ax.barh(0, 1, left=g, color=c)
        ax.barh(1, 1, left=g + 0.5, color=c)
    assert any("no legend" in d for d in defects(fig))
    cbar = fc.colorbar_legend(fig, ax, colours, 1, "wave group")
    assert defects(fig) == []
    assert all(float(t).is_integer() for t in cbar.ax.get_yticks())


def test_a_colorbar_legend_of_one_colour_has_one_integer_tick():
    fig, ax = plt.subplots()
    labelled(ax).barh(0, 1, color="C0")
    cbar = fc.colorbar_legend(fig, ax, ["C0"], 1, "wave group")
    assert defects(fig) == [] and list(cbar.get_ticks()) == [1]


def test_a_figure_made_without_pyplot_is_checked():
    from matplotlib.figure import Figure

    fig = Figure()
    fig.add_subplot().plot([0, 1], [0, 1])
    canvas = fig.canvas
    assert len(defects(fig)) == 2 and fig.canvas is canvas


def test_save_checks_only_when_asked(tmp_path, monkeypatch):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])  # no axis labels
    monkeypatch.delenv("FO_FIGURE_CHECKS", raising=False)
    assert all(p.exists() for p in common.save(fig, "unchecked", tmp_path))
    monkeypatch.setenv("FO_FIGURE_CHECKS", "1")
    with pytest.raises(fc.FigureDefect):
        common.save(fig, "checked", tmp_path)
    assert not list(tmp_path.glob("checked.*"))


def test_a_timeline_of_21_groups_draws_21_colours_and_passes():
    import pandas as pd

    from fo_lib.experiments import timeline

    rows = [dict(source="measured", span="gemm", group=-1, start_ms=0.0, end_ms=2.1)]
    for g in range(21):
        rows += [dict(source="model", span="gemm", group=g, start_ms=g * 0.1, end_ms=(g + 1) * 0.1),
                 dict(source="model", span="group", group=g, start_ms=(g + 1) * 0.1, end_ms=(g + 1.5) * 0.1)]
    fig, ax = plt.subplots(figsize=(10, 3))
    timeline.plot(ax, pd.DataFrame(rows))
    waves = [p for p in ax.patches if p.get_y() + p.get_height() / 2 == 3]  # the model's GEMM lane
    assert len({p.get_facecolor() for p in waves}) == 21
    assert defects(fig) == []


def test_zoom_speedups_spans_the_values_with_ticks_every_step():
    fig, ax = plt.subplots()
    labelled(ax).bar([0, 1, 2], [0.93, 1.04, np.nan])
    common.zoom_speedups(ax, [0.93, 1.04, np.nan])
    lo, hi = ax.get_ylim()
    assert lo == pytest.approx(0.9) and 1.04 < hi < 1.1
    assert np.allclose(np.diff(ax.get_yticks()), 0.1)
    common.zoom_speedups(ax, [0.05, 0.5])  # never below 0, always up to 1
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] > 1
