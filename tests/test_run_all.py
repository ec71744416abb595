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


def run_all_before_setup(*args, tmp_path):
    """run_all.sh where starting the environment leaves a mark: a stand-in python3 that records being
    run, so a test can tell an argument refused up front from one refused after set-up began."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    marker = tmp_path / "setup_started"
    (fake / "python3").write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    (fake / "python3").chmod(0o755)
    env = dict(os.environ, FO_NO_VENV="0", FO_VENV=str(tmp_path / "venv"), PYTHON=str(fake / "python3"),
               PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    res = subprocess.run([str(ROOT / "run_all.sh"), *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    return res, marker.exists()


@pytest.mark.parametrize("args, needle", [
    (("--only",), "--only needs a value"),
    (("--mode",), "--mode needs a value"),
    (("--data",), "--data needs a value"),
    (("--output",), "--output needs a value"),
    (("--figures",), "--figures needs a value"),
    (("--only", "--quick"), "--only needs a value"),
    (("--only", ""), "--only needs a value"),
    (("--mode", "nonsense"), "--mode must be one of auto, measure, replay"),
    (("--data", "missing"), "no recorded data set data/missing"),
    (("--data", "../h200"), "--data must be the name of a folder in data/"),
    (("--only", "99_missing"), "no notebook matches --only 99_missing"),
    (("--figures", "run_all.sh"), "is not a folder"),
    (("--bogus",), "unknown argument --bogus"),
], ids=lambda v: v if isinstance(v, str) else " ".join(v) or "empty")
def test_run_all_refuses_bad_arguments_up_front_in_one_line(args, needle, tmp_path):
    # --figures run_all.sh: relative paths are taken from the repository root, where that is a file.
    res, setup_started = run_all_before_setup(*args, tmp_path=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.splitlines() == [res.stderr.strip()] and needle in res.stderr, res.stderr
    assert res.stdout == "" and not setup_started


def test_run_all_reports_every_bad_argument(tmp_path):
    res, setup_started = run_all_before_setup("--mode", "nonsense", "--data", "missing", "--only", "",
                                              tmp_path=tmp_path)
    lines = res.stderr.splitlines()
    assert res.returncode == 2 and len(lines) == 3 and not setup_started, res.stderr
    assert all(line.startswith("run_all.sh: ") for line in lines)


def test_run_all_refuses_a_notebook_without_a_parameter_it_injects(tmp_path):
    # papermill only logs a warning for a parameter the notebook does not declare, and the notebook
    # then runs with its default (e.g. figures in the repository instead of --figures).
    import shutil
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "data" / "h200").mkdir(parents=True)
    (repo / "scripts").mkdir()
    shutil.copy(ROOT / "run_all.sh", repo / "run_all.sh")
    shutil.copy(ROOT / "scripts" / "setup_venv.sh", repo / "scripts" / "setup_venv.sh")
    nb = nbformat.read(ROOT / "notebooks" / f"{NOTEBOOK}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", ()))
    cell.source = "\n".join(line for line in cell.source.splitlines() if not line.startswith("figures_dir"))
    nbformat.write(nb, repo / "notebooks" / f"{NOTEBOOK}.ipynb")
    res = subprocess.run([str(repo / "run_all.sh"), "--figures", str(tmp_path / "figs")], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, FO_NO_VENV="1"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip() == (f"run_all.sh: notebooks/{NOTEBOOK}.ipynb declares no parameter figures_dir "
                                  "in its 'parameters' cell")
