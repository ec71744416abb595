"""Every notebook runs headlessly with papermill in replay mode (CPU, recorded data/h200), writes its
figures (PNG and SVG) and shows them inline (an image output in the executed notebook). The replays
run with FO_FIGURE_CHECKS=1, so a figure with a defect (fo_lib.experiments.figure_checks) fails its
notebook."""
import os
from pathlib import Path

import pytest

import papermill  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
def test_notebooks_exist():
    assert len(NOTEBOOKS) >= 8


@pytest.fixture(scope="module")
def replays(tmp_path_factory):
    """Every notebook replayed once, two at a time (each papermill run waits on its own kernel
    process, so two threads keep both cores busy): notebook stem -> (executed notebook, figures dir)
    or the exception its replay raised, which its test re-raises."""
    from concurrent.futures import ThreadPoolExecutor

    def replay(nb):
        out = tmp_path_factory.mktemp(nb.stem)
        figs = out / "figures"
        try:
            done = papermill.execute_notebook(
                str(nb), str(out / nb.name), kernel_name="python3", progress_bar=False,
                parameters=dict(mode="replay", quick=True, data_set="h200", figures_dir=str(figs)),
                cwd=str(ROOT / "notebooks"))
        except Exception as exc:  # noqa: BLE001 - handed to the notebook's own test
            return nb.stem, exc
        return nb.stem, (done, figs)

    # The base folder is made on first use: made here, not by two threads at once (FileExistsError).
    tmp_path_factory.getbasetemp()
    # The kernels papermill starts inherit this process's environment.
    with ThreadPoolExecutor(max_workers=2) as pool:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("FO_FIGURE_CHECKS", "1")
            return dict(pool.map(replay, NOTEBOOKS))


def test_replays_check_their_figures():
    """The kernel sees the switch: a figure with a defect fails its replay."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt, tempfile\n"
        "from fo_lib import experiments as ex\n"
        "fig, ax = plt.subplots(); ax.plot([0, 1], [0, 1])\n"
        "ex.save(fig, 'unlabelled', tempfile.mkdtemp())")])
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FO_FIGURE_CHECKS", "1")
        with pytest.raises(papermill.PapermillExecutionError, match="FigureDefect"):
            papermill.execute_notebook(nb, None, kernel_name="python3", progress_bar=False)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_replays_and_writes_figures(nb, replays):
    result = replays[nb.stem]
    if isinstance(result, Exception):
        raise result
    done, figs = result
    for ext in ("png", "svg"):
        out = figs / f"{nb.stem}.{ext}"
        assert out.exists() and out.stat().st_size > 1000, out
    images = [o for c in done.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "no figure displayed inline"
    # The replay draws the committed figures byte for byte (so ./run_all.sh leaves the tree clean,
    # and figures depend on the recorded data alone: no date, version or live timing in them).
    changed = [p.name for p in sorted(figs.iterdir()) if p.read_bytes() != (ROOT / "figures" / p.name).read_bytes()]
    assert changed == [], f"the replay drew other bytes than figures/ holds: {changed} (regenerate them)"
    # What a visitor sees without running: the committed outputs are this replay's, image for image
    # (scripts/tooling/build_notebooks.py --outputs keeps them; a changed figure must be rebuilt in).
    import nbformat
    from script_loader import load_script

    bn = load_script("scripts/tooling/build_notebooks.py")
    committed = nbformat.read(nb, as_version=4)
    replayed = bn.executed_outputs_of(done)
    for cell in committed.cells:
        if cell.cell_type != "code":
            continue
        want = [] if bn.LIVE_TAG in cell.metadata.get("tags", ()) else replayed.get(cell.id, (None, []))[1]
        assert cell.outputs == want, f"cell {cell.id}: committed outputs differ from the replay's (rebuild them)"
    shown = [o for c in committed.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    kept = [o for c in done.cells if bn.LIVE_TAG not in c.metadata.get("tags", ())
            for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert shown and len(shown) == len(kept), "every figure the replay shows (but a live one) is committed inline"
