"""What the committed notebooks keep of a replay's outputs (scripts/tooling/build_notebooks.py): images,
text and stdout as displays without execution counts; nothing of live cells, widgets, stderr or the
parameters; an error stops the build; a rebuild keeps the outputs of unchanged cells only."""
import nbformat
import pytest
from script_loader import load_script

bn = load_script("scripts/tooling/build_notebooks.py")
v4 = nbformat.v4


def _cell(outputs, tags=(), source="x = 1"):
    cell = v4.new_code_cell(source, metadata={"tags": list(tags)} if tags else {})
    cell.outputs = outputs
    cell.execution_count = 7
    return cell


PNG = {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure size 640x480 with 1 Axes>"}


def test_images_text_and_stdout_are_kept_as_displays():
    cell = _cell([v4.new_output("stream", name="stdout", text="mean error 2.6 %\n"),
                  v4.new_output("stream", name="stderr", text="100%|####| 3/3 [00:01<00:00]\n"),
                  v4.new_output("display_data", data=PNG, metadata={"image/png": {"width": 600}, "x": 1}),
                  v4.new_output("execute_result", data={"text/plain": "42", "text/html": "<b>42</b>"},
                                execution_count=7)])
    out = bn.committed_outputs(cell)
    assert [o.output_type for o in out] == ["stream", "display_data", "display_data"]
    assert out[0].text == "mean error 2.6 %\n" and out[1].data == PNG
    assert out[1].metadata == {"image/png": {"width": 600}}
    assert out[2].data == {"text/plain": "42", "text/html": "<b>42</b>"} and "execution_count" not in out[2]


@pytest.mark.parametrize("tags", [["live"], ["parameters"], ["injected-parameters"]])
def test_live_and_parameter_cells_commit_nothing(tags):
    assert bn.committed_outputs(_cell([v4.new_output("display_data", data=PNG)], tags=tags)) == []


def test_a_widget_commits_nothing_and_an_error_stops_the_build():
    widget = {"application/vnd.jupyter.widget-view+json": {"model_id": "abc"}, "text/plain": "VBox()"}
    assert bn.committed_outputs(_cell([v4.new_output("display_data", data=widget)])) == []
    bad = v4.new_output("error", ename="ValueError", evalue="no data", traceback=[])
    with pytest.raises(ValueError, match="ValueError: no data"):
        bn.committed_outputs(_cell([bad]))


def test_a_rebuild_keeps_the_outputs_of_unchanged_cells_only(tmp_path):
    src = tmp_path / "01_demo.py"
    src.write_text("# %%\nx = 1\n\n# %%\ny = 2\n")
    built = bn.build(src)
    shown = [v4.new_output("display_data", data=PNG)]
    nbformat.write(bn.with_outputs(bn.build(src), {c.id: shown for c in built.cells}), src.with_suffix(".ipynb"))
    src.write_text("# %%\nx = 1\n\n# %%\ny = 3\n")  # the second cell changed
    rebuilt = bn.build(src)
    kept = bn.kept_outputs(src, rebuilt)
    first, second = [c.id for c in rebuilt.cells]
    assert kept[first][0].data == PNG and second not in kept
    nb = bn.with_outputs(rebuilt, kept)
    assert nb.cells[1].outputs == [] and all(c.execution_count is None for c in nb.cells)


def test_an_executed_copy_older_than_a_cells_edit_gives_that_cell_no_outputs(tmp_path):
    src = tmp_path / "01_demo.py"
    src.write_text("# %%\nx = 1\n\n# %%\ny = 2\n")
    ran = bn.build(src)
    for c in ran.cells:
        c.outputs = [v4.new_output("display_data", data=PNG)]
    src.write_text("# %%\nx = 1\n\n# %%\ny = 3\n")  # edited after the run
    built = bn.build(src)
    got = bn.matching(built, bn.executed_outputs_of(ran))
    first, second = [c.id for c in built.cells]
    assert got[first][0].data == PNG and second not in got
