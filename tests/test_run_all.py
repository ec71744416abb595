"""run_all.sh itself: the parameters papermill injects into the executed notebooks are typed (quick is
a bool, not the truthy string "false"). Runs the script on its smallest notebook only."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nbformat  # noqa: E402
import papermill  # noqa: E402,F401  (run_all.sh runs it)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "02_reorder_patterns"  # live mapping tables only: a few seconds on a CPU


def run_all(*args, tmp_path):
    # FO_NO_VENV=1: the python3 of this interpreter's environment, no .venv set-up.
    env = dict(os.environ, FO_NO_VENV="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([str(ROOT / "run_all.sh"), *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)


def injected_parameters(path: Path) -> dict:
    cells = [c for c in nbformat.read(path, as_version=4).cells if "injected-parameters" in c.metadata.get("tags", ())]
    assert len(cells) == 1
    return {s.targets[0].id: ast.literal_eval(s.value) for s in ast.parse(cells[0].source).body}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("flags, quick", [((), False), (("--quick",), True)], ids=["full", "quick"])
def test_run_all_injects_quick_as_a_bool(flags, quick, tmp_path):
    out, figs = tmp_path / "out", tmp_path / "figs"
    res = run_all("--only", NOTEBOOK, "--mode", "replay", "--output", str(out), "--figures", str(figs), *flags,
                  tmp_path=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    params = injected_parameters(out / f"{NOTEBOOK}.ipynb")
    assert params["quick"] is quick
    assert params["mode"] == "replay" and params["data_set"] == "h200"
    assert params["figures_dir"] == str(figs.resolve())
    assert (figs / f"{NOTEBOOK}.png").exists()
    assert sorted(p.name for p in out.glob("*.ipynb")) == [f"{NOTEBOOK}.ipynb"]  # --only ran just that one


def test_run_all_refuses_an_only_that_matches_no_notebook(tmp_path):
    res = run_all("--only", "99_missing", "--output", str(tmp_path / "out"), tmp_path=tmp_path)
    assert res.returncode == 2 and "no notebook matches" in res.stderr
