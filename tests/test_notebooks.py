"""Every notebook runs headlessly with papermill in replay mode (CPU, recorded data/h200), writes its
figures (PNG and SVG) and shows them inline (an image output in the executed notebook)."""
from pathlib import Path

import pytest

import papermill  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_notebooks_exist():
    assert len(NOTEBOOKS) >= 8


@pytest.mark.timeout(600)
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_replays_and_writes_figures(nb, tmp_path):
    figs = tmp_path / "figures"
    done = papermill.execute_notebook(str(nb), str(tmp_path / nb.name), kernel_name="python3", progress_bar=False,
                                      parameters=dict(mode="replay", quick=True, data_set="h200", figures_dir=str(figs)),
                                      cwd=str(ROOT / "notebooks"))
    for ext in ("png", "svg"):
        out = figs / f"{nb.stem}.{ext}"
        assert out.exists() and out.stat().st_size > 1000, out
    images = [o for c in done.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "no figure displayed inline"
