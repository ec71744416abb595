"""run_all.sh's scheduler on the CPU: a fake GPU list and a fake launcher that records when and where
each notebook ran (fo_lib.run_all_schedule)."""
import ast
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from fo_lib import run_all_schedule as ras

ROOT = Path(__file__).resolve().parents[1]
SINGLES = ["00_a", "01_b", "02_c", "03_d", "05_e", "06_f", "13_g"]
NOTEBOOKS = [f"notebooks/{n}.ipynb" for n in SINGLES[:6] + ["08_multi_gpu", "12_prediction_error", "13_g"]]
FOUR = ["0", "1", "2", "3"]


class FakeLauncher:
    """Sleeps ``seconds``, writes a 40-line log and the figures ``figures[stem]``; fails ``fail``."""

    def __init__(self, figures_dir, seconds=0.2, fail=(), figures=None):
        self.figures_dir, self.seconds, self.fail = Path(figures_dir), seconds, set(fail)
        self.figures = figures if figures is not None else {}
        self.runs = {}  # stem -> (CUDA_VISIBLE_DEVICES or None, start, end)
        self.lock = threading.Lock()

    def __call__(self, notebook, env, log):
        start = time.monotonic()
        for name in self.figures.get(notebook.stem, ()):
            (self.figures_dir / name).write_bytes(b"png")
        log.write_text("".join(f"{notebook.stem} line {i}\n" for i in range(40)))
        time.sleep(self.seconds)
        with self.lock:
            self.runs[notebook.stem] = (env.get("CUDA_VISIBLE_DEVICES"), start, time.monotonic())
        return 1 if notebook.stem in self.fail else 0


def run(tmp_path, gpus, stagger=0.05, **kw):
    figs = tmp_path / "figs"
    figs.mkdir(exist_ok=True)
    fake = FakeLauncher(figs, **kw)
    results = ras.schedule(NOTEBOOKS, gpus, fake, figures_dir=figs, logs_dir=tmp_path / "logs", stagger=stagger,
                           echo=lambda line: None)
    return results, fake


def overlap(a, b) -> bool:
    return a[1] < b[2] and b[1] < a[2]


@pytest.mark.parametrize("gpus", [[], ["0"]], ids=["no GPU", "one GPU"])
def test_without_several_gpus_the_notebooks_run_in_order_in_the_inherited_environment(gpus, tmp_path):
    results, fake = run(tmp_path, gpus, stagger=5.0, seconds=0.02)
    names = [Path(nb).stem for nb in NOTEBOOKS]
    assert [r.notebook for r in results] == [f"{n}.ipynb" for n in names]
    assert all(r.status == "ok" for r in results)
    assert all(env is None for env, _, _ in fake.runs.values())  # CUDA_VISIBLE_DEVICES left alone
    assert sorted(fake.runs, key=lambda n: fake.runs[n][1]) == names
    spans = [fake.runs[n] for n in names]
    assert all(a[2] <= b[1] for a, b in zip(spans, spans[1:]))  # one at a time
    assert spans[-1][2] - spans[0][1] < 2.0  # and not staggered: one process never races another
    assert {r.gpus for r in results} == {gpus[0] if gpus else "-"}


def test_four_gpus_run_single_gpu_notebooks_side_by_side_then_multi_gpu_ones_on_all(tmp_path):
    stagger = 0.1
    results, fake = run(tmp_path, FOUR, stagger=stagger, seconds=0.6)
    assert all(r.status == "ok" for r in results)
    singles = {n: fake.runs[n] for n in SINGLES}
    assert {env for env, _, _ in singles.values()} <= set(FOUR)
    for gpu in FOUR:  # each GPU runs one notebook at a time
        on_gpu = [s for s in singles.values() if s[0] == gpu]
        assert not any(overlap(a, b) for i, a in enumerate(on_gpu) for b in on_gpu[i + 1:]), gpu
    most_at_once = max(sum(b[1] <= a[1] < b[2] for b in singles.values()) for a in singles.values())
    assert most_at_once == 4  # every GPU busy at once
    starts = sorted(s[1] for s in singles.values())
    assert all(b - a >= stagger / 2 for a, b in zip(starts, starts[1:]))  # half: a busy machine's jitter
    multi = [fake.runs["08_multi_gpu"], fake.runs["12_prediction_error"]]
    assert [m[0] for m in multi] == ["0,1,2,3"] * 2
    assert min(m[1] for m in multi) >= max(s[2] for s in singles.values())  # after every single-GPU one
    assert multi[0][2] <= multi[1][1]  # 12 reads what 08 measured
    by_name = {r.notebook: r for r in results}
    assert by_name["08_multi_gpu.ipynb"].gpus == "0,1,2,3" and by_name["00_a.ipynb"].gpus in FOUR
    assert [r.notebook for r in results] == [Path(nb).name for nb in NOTEBOOKS]


def test_the_summary_counts_the_figures_each_notebook_wrote(tmp_path):
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "00_a.png").write_bytes(b"png")  # an old figure 00_a rewrites: counted
    (figs / "01_b.png").write_bytes(b"png")  # an old figure nobody rewrites: not counted
    (figs / ".00_a.123.tmp.png").write_bytes(b"")  # a writer's temporary: not a figure
    time.sleep(0.01)
    written = {"00_a": ["00_a.png", "00_a.svg", "00_extra.png"], "08_multi_gpu": ["08_multi_gpu.png"]}
    results, _ = run(tmp_path, FOUR, seconds=0.05, figures=written)
    by_name = {r.notebook: r for r in results}
    assert by_name["00_a.ipynb"].figures == ("00_a.png", "00_a.svg", "00_extra.png")
    assert by_name["01_b.ipynb"].figures == () and by_name["08_multi_gpu.ipynb"].figures == ("08_multi_gpu.png",)
    lines = ras.summary_table(results).splitlines()
    assert lines[0].split() == ["notebook", "GPU", "seconds", "status", "figures"]
    assert len(lines) == 1 + len(NOTEBOOKS)
    row = {line.split()[0]: line.split() for line in lines[1:]}
    assert row["00_a.ipynb"][1] in FOUR and row["00_a.ipynb"][3:] == ["ok", "3"]
    assert row["08_multi_gpu.ipynb"][1:2] == ["0,1,2,3"] and row["08_multi_gpu.ipynb"][3:] == ["ok", "1"]
    assert float(row["00_a.ipynb"][2]) >= 0.05


def test_a_failing_notebook_lets_the_parallel_ones_finish_and_every_failure_is_reported(tmp_path):
    results, fake = run(tmp_path, FOUR, seconds=0.1, fail={"01_b", "05_e"})
    status = {r.notebook: r.status for r in results}
    assert status["01_b.ipynb"] == status["05_e.ipynb"] == "FAILED"
    assert all(status[f"{n}.ipynb"] == "ok" for n in SINGLES if n not in ("01_b", "05_e"))
    assert set(SINGLES) <= set(fake.runs)  # all ran, the failures too
    assert status["08_multi_gpu.ipynb"] == status["12_prediction_error.ipynb"] == "skipped"
    assert "08_multi_gpu" not in fake.runs
    report = ras.failure_report(results).splitlines()
    assert report[0] == f"run_all.sh: FAILED in notebook 01_b.ipynb (log: {tmp_path / 'logs' / '01_b.log'})"
    assert report[1:31] == [f"01_b line {i}" for i in range(10, 40)]  # the log's last 30 lines
    assert report[31].startswith("run_all.sh: FAILED in notebook 05_e.ipynb") and len(report) == 62
    assert "skipped" in ras.summary_table(results)


def test_without_several_gpus_a_failure_stops_the_run_as_before(tmp_path):
    results, fake = run(tmp_path, ["0"], seconds=0.01, fail={"02_c"})
    assert [r.status for r in results] == ["ok", "ok", "FAILED"] + ["skipped"] * (len(NOTEBOOKS) - 3)
    assert sorted(fake.runs) == ["00_a", "01_b", "02_c"]
    assert ras.failure_report(results).startswith("run_all.sh: FAILED in notebook 02_c.ipynb")


def test_a_launcher_that_cannot_start_fails_its_notebook_with_the_reason_in_the_log(tmp_path):
    def broken(notebook, env, log):
        raise FileNotFoundError("no papermill here")
    results = ras.schedule(NOTEBOOKS[:2], FOUR, broken, figures_dir=tmp_path, logs_dir=tmp_path / "logs",
                           stagger=0.0, echo=lambda line: None)
    assert [r.status for r in results] == ["FAILED", "FAILED"]
    assert "no papermill here" in ras.failure_report(results)


def test_an_interrupt_starts_no_further_notebook(tmp_path):
    started, both, release = [], threading.Event(), threading.Event()

    def slow(notebook, env, log):
        started.append(notebook.stem)
        if len(started) == 2:
            both.set()
        release.wait(30)  # the running notebooks outlast the interrupt, however loaded the machine
        return 0

    def ctrl_c():
        both.wait(5)
        os.kill(os.getpid(), signal.SIGINT)  # a real signal: it wakes the main thread's wait at once
    # Python's own SIGINT handler, whatever a library an earlier test loaded put in its place.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=ctrl_c, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            ras.schedule(NOTEBOOKS, ["0", "1"], slow, figures_dir=tmp_path, logs_dir=tmp_path, stagger=0.02,
                         echo=lambda line: None)
    finally:
        release.set()  # the two running ones end now: the queue would run on, were it not cancelled
        signal.signal(signal.SIGINT, previous)
    time.sleep(1.0)
    assert sorted(started) == ["00_a", "01_b"]  # (in either order: two threads)


def test_main_exits_1_after_the_table_and_names_the_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FO_FAKE_GPUS", "0,1")
    seen = {}

    def launcher(output, papermill_args):
        seen["args"] = (output, papermill_args)
        return FakeLauncher(tmp_path, seconds=0.01, fail={"02_c"})
    nbs = NOTEBOOKS[:3]
    rc = ras.main(["--output", str(tmp_path / "out"), "--figures", str(tmp_path), "--stagger", "0", *nbs,
                   "--", "-r", "mode", "replay"], launcher=launcher)
    out, err = capsys.readouterr()
    assert rc == 1 and seen["args"] == (tmp_path / "out", ["-r", "mode", "replay"])
    last = out.strip().splitlines()[-1].split()  # the table ends the output
    assert "2 GPUs (0,1)" in out and last[0] == "02_c.ipynb" and last[1] in ("0", "1") and last[3] == "FAILED"
    assert err.startswith("run_all.sh: FAILED in notebook 02_c.ipynb")
    assert (tmp_path / "out" / "02_c.log").exists()
    rc = ras.main(["--output", str(tmp_path / "out"), "--stagger", "0", *NOTEBOOKS[:2]],
                  launcher=lambda o, a: FakeLauncher(tmp_path, seconds=0.01))
    assert rc == 0


class FakeSmi:
    def __init__(self, stdout="", returncode=0, missing=False):
        self.stdout, self.returncode, self.missing = stdout, returncode, missing

    def __call__(self, cmd, **kw):
        assert cmd == ["nvidia-smi", "-L"]
        if self.missing:
            raise FileNotFoundError("nvidia-smi")
        return subprocess.CompletedProcess(cmd, self.returncode, self.stdout, "")


SMI_TWO = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n"
           "  MIG 1g.10gb     Device  0: (UUID: MIG-bbbb)\n"
           "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-cccc)\n")


@pytest.mark.parametrize("env, smi, expected", [
    ({"FO_FAKE_GPUS": "0,1,2,3"}, FakeSmi(missing=True), FOUR),
    ({"FO_FAKE_GPUS": ""}, FakeSmi(SMI_TWO), []),
    ({}, FakeSmi(missing=True), []),
    ({}, FakeSmi("NVIDIA-SMI has failed", returncode=9), []),
    ({}, FakeSmi(SMI_TWO), ["0", "1"]),
    ({"CUDA_VISIBLE_DEVICES": "1"}, FakeSmi(SMI_TWO), ["1"]),
    ({"CUDA_VISIBLE_DEVICES": ""}, FakeSmi(SMI_TWO), []),
    ({"CUDA_VISIBLE_DEVICES": "1,7,0"}, FakeSmi(SMI_TWO), ["1"]),  # CUDA stops at the unknown 7
    ({"CUDA_VISIBLE_DEVICES": "GPU-cccc"}, FakeSmi(SMI_TWO), ["GPU-cccc"]),
], ids=["fake", "fake none", "no nvidia-smi", "no driver", "two", "narrowed", "hidden", "invalid", "uuid"])
def test_the_gpu_list(env, smi, expected):
    assert ras.list_gpus(env, run=smi) == expected


def _experiments_counting_gpus() -> set[str]:
    return {p.stem for p in (ROOT / "fo_lib" / "experiments").glob("*.py") if "gpu_count()" in p.read_text()}


def _runs_a_gpu_counting_experiment(source: str, counting: set[str]) -> bool:
    """Whether a notebook source calls ``run`` of an experiment that counts the GPUs, through the
    package (``ex.multi_gpu.run``) or a name bound to the module (``pe = ex.prediction_error``)."""
    tree = ast.parse(source)
    packages, modules = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "fo_lib":
            packages |= {a.asname or a.name for a in node.names if a.name == "experiments"}
        elif isinstance(node, ast.ImportFrom) and node.module == "fo_lib.experiments":
            modules |= {a.asname or a.name: a.name for a in node.names}
        elif isinstance(node, ast.Import):
            packages |= {a.asname for a in node.names if a.name == "fo_lib.experiments" and a.asname}

    def module_of(expr):
        if isinstance(expr, ast.Name):
            return modules.get(expr.id)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id in packages:
            return expr.attr
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if (mod := module_of(node.value)) is not None:
                modules[node.targets[0].id] = mod
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "run"
               and module_of(n.func.value) in counting for n in ast.walk(tree))


def test_the_multi_gpu_list_is_the_notebooks_that_run_a_gpu_counting_experiment():
    counting = _experiments_counting_gpus()
    assert {"multi_gpu", "prediction_error"} <= counting
    found = {p.stem for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
             if _runs_a_gpu_counting_experiment(p.read_text(), counting)}
    assert found == set(ras.MULTI_GPU)
    assert list(ras.MULTI_GPU) == sorted(ras.MULTI_GPU)  # run in the order the later reads the earlier


@pytest.mark.parametrize("source, expected", [
    ("from fo_lib import experiments as ex\nds = ex.multi_gpu.run(mode, None, quick)", True),
    ("from fo_lib import experiments as ex\npe = ex.prediction_error\nsets = pe.run(mode)", True),
    ("from fo_lib.experiments import multi_gpu as mg\nmg.run()", True),
    ("from fo_lib import experiments as ex\nsets = ex.multi_gpu.data_sets()", False),
    ("from fo_lib import experiments as ex\nds = ex.overlap.run(mode)", False),
], ids=["package", "bound name", "imported module", "reads records only", "one-GPU experiment"])
def test_the_multi_gpu_detection_tells_the_cases_apart(source, expected):
    assert _runs_a_gpu_counting_experiment(source, {"multi_gpu", "prediction_error"}) is expected


def test_notebooks_that_write_one_record_run_one_after_another_on_one_gpu(tmp_path):
    """03, 04 and 05 each record the overlap sweep when they measure and 07 reads it: side by side
    they would race for the same files, so they run in one chain on one GPU, beside the others; a
    failure in the chain skips the rest of it."""
    chain = list(ras.SAME_RECORD[0])
    others = ["00_a", "01_b", "02_c", "06_f"]
    order = [others[0], chain[0], others[1], chain[1], others[2], *chain[2:], others[3]]
    notebooks = [f"notebooks/{n}.ipynb" for n in order]
    figs = tmp_path / "figs"
    figs.mkdir()
    fake = FakeLauncher(figs, seconds=0.3)
    results = ras.schedule(notebooks, FOUR, fake, figures_dir=figs, logs_dir=tmp_path / "logs", stagger=0.01,
                           echo=lambda line: None)
    assert all(r.status == "ok" for r in results)
    spans = [fake.runs[n] for n in chain]
    assert len({s[0] for s in spans}) == 1  # one GPU
    assert all(a[2] <= b[1] for a, b in zip(spans, spans[1:]))  # in order, one at a time
    assert any(overlap(spans[0], fake.runs[o]) for o in others)  # the chain still runs beside the others
    assert [r.notebook for r in results] == [Path(nb).name for nb in notebooks]
    fake = FakeLauncher(figs, seconds=0.05, fail={chain[1]})
    results = ras.schedule(notebooks, FOUR, fake, figures_dir=figs, logs_dir=tmp_path / "logs2", stagger=0.01,
                           echo=lambda line: None)
    status = {r.notebook: r.status for r in results}
    assert status[f"{chain[1]}.ipynb"] == "FAILED"
    assert all(status[f"{n}.ipynb"] == "skipped" and n not in fake.runs for n in chain[2:])
    assert status["06_f.ipynb"] == "ok"


def test_the_same_record_chains_name_notebooks_that_exist():
    stems = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py")}
    assert all(name in stems for chain in ras.SAME_RECORD for name in chain)
