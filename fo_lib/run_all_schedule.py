"""Which notebook of ``run_all.sh`` runs where and when, and the summary table at the end.

With several GPUs the single-GPU notebooks run side by side, one papermill process per GPU
(``CUDA_VISIBLE_DEVICES`` names its GPU), their starts a couple of seconds apart because Jupyter
kernels started together race for the same free ports. Then the notebooks in :data:`MULTI_GPU` run
one after another on every GPU. With one GPU or none every notebook runs in order, as one process
each. A failing notebook fails the run: the others of its parallel phase still finish, then every
failure is reported with the tail of its log; what was still to start is skipped.

``run_all.sh`` calls this once the environment is ready::

    python -m fo_lib.run_all_schedule --output DIR --figures DIR NOTEBOOK.ipynb ... -- PAPERMILL_ARGS ...

The GPUs are those ``nvidia-smi -L`` lists (none without it), narrowed to ``CUDA_VISIBLE_DEVICES``
where that is set. For tests, ``FO_FAKE_GPUS=0,1,2,3`` stands in for that list (empty: no GPU).
"""
from __future__ import annotations

import argparse
import os
import queue
import re
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

# Notebooks that measure with every visible GPU. 08 runs torchrun over all of them
# (fo_lib.experiments.multi_gpu.run); 12 compares against the multi-GPU sweep 08 just measured and
# counts the GPUs to find it (fo_lib.experiments.prediction_error.run), so it runs after 08.
MULTI_GPU = ("08_multi_gpu", "12_prediction_error")
# Notebooks that write the same record when they measure (fo_lib.experiments.overlap.run records the
# overlap sweep from each of 03-05), or read it (07's timeline takes its profiles): one after another
# on one GPU, or a notebook would read, or leave, a CSV and a sidecar from different runs.
SAME_RECORD = (("03_partition_sweep", "04_predictive_search", "05_speedup", "07_timeline"),)
STAGGER_S = 2.0
LOG_TAIL_LINES = 30

# (notebook, environment variables to set, log file) -> exit status
Launcher = Callable[[Path, Mapping[str, str], Path], int]


@dataclass(frozen=True)
class Result:
    notebook: str  # the file name, e.g. "03_partition_sweep.ipynb"
    gpus: str  # "0", "0,1,2,3", or "-" where the process chose (one GPU or none)
    status: str  # "ok", "FAILED" or "skipped"
    seconds: float = 0.0
    figures: tuple[str, ...] = ()
    log: Path | None = None


def _physical_gpus(run=subprocess.run) -> list[str]:
    try:
        out = run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:  # a driver that is missing or broken: no usable GPU
        return []
    return re.findall(r"^GPU (\d+):", out.stdout, flags=re.MULTILINE)


def list_gpus(env: Mapping[str, str] = os.environ, run=subprocess.run) -> list[str]:
    """The GPUs to schedule on, as ``CUDA_VISIBLE_DEVICES`` entries. ``nvidia-smi -L`` needs neither
    torch nor a CUDA context, so this costs the same on a machine without GPUs."""
    if "FO_FAKE_GPUS" in env:
        return [g.strip() for g in env["FO_FAKE_GPUS"].split(",") if g.strip()]
    physical = _physical_gpus(run)
    if not physical or "CUDA_VISIBLE_DEVICES" not in env:
        return physical
    # CUDA ignores the entries from the first one it cannot resolve on; so do we.
    chosen = []
    for entry in (e.strip() for e in env["CUDA_VISIBLE_DEVICES"].split(",")):
        if entry not in physical and not entry.startswith(("GPU-", "MIG-")):
            break
        chosen.append(entry)
    return chosen


def needs_all_gpus(notebook: str | Path) -> bool:
    return Path(notebook).stem in MULTI_GPU


def _figure_prefix(notebook: Path) -> str:
    # Each notebook's figures start with its number (08_multi_gpu also writes 08_time_breakdown), so
    # notebooks running side by side never claim each other's.
    return notebook.stem.split("_", 1)[0] + "_"


def _figure_stamps(figures_dir: Path, prefix: str) -> dict[str, tuple[int, int, int]]:
    """Every figure of ``prefix`` with its inode, modification time and size: the atomic writes of
    fo_lib.experiments.common.save put a new inode there even where the bytes are the same."""
    if not figures_dir.is_dir():
        return {}
    out = {}
    for p in figures_dir.iterdir():
        if p.name.startswith(prefix) and p.is_file():  # the writers' temporaries start with a dot
            st = p.stat()
            out[p.name] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return out


class _Runner:
    """Runs and times one notebook and finds its figures; parallel launches go ``stagger`` apart."""

    def __init__(self, launch: Launcher, figures_dir: Path, logs_dir: Path, stagger: float, echo):
        self.launch, self.figures_dir, self.logs_dir = launch, Path(figures_dir), Path(logs_dir)
        self.stagger, self.echo = stagger, echo
        self._start_lock = threading.Lock()
        self._next_start = 0.0

    def _wait_turn(self) -> None:
        with self._start_lock:  # held while sleeping: the next launch waits its turn behind this one
            wait = self._next_start - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self._next_start = time.monotonic() + self.stagger

    def run(self, notebook: Path, gpus: Sequence[str], *, set_visible: bool, staggered: bool) -> Result:
        label = ",".join(gpus) if set_visible else (gpus[0] if gpus else "-")
        env = {"CUDA_VISIBLE_DEVICES": ",".join(gpus)} if set_visible else {}
        log = self.logs_dir / f"{notebook.stem}.log"
        prefix = _figure_prefix(notebook)
        before = _figure_stamps(self.figures_dir, prefix)
        if staggered:
            self._wait_turn()
        self.echo(f"[run_all] {notebook.name} on GPU {label}" if gpus else f"[run_all] {notebook.name}")
        start = time.monotonic()
        try:
            status = self.launch(notebook, env, log)
        except Exception:  # a launcher that cannot start (papermill missing) fails this notebook only
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as f:
                f.write(traceback.format_exc())
            status = 1
        seconds = time.monotonic() - start
        after = _figure_stamps(self.figures_dir, prefix)
        figures = tuple(sorted(n for n, stamp in after.items() if before.get(n) != stamp))
        result = Result(notebook.name, label, "ok" if status == 0 else "FAILED", seconds, figures, log)
        self.echo(f"[run_all] {notebook.name}: {result.status} in {seconds:.0f} s")
        return result


def _in_order(runner: _Runner, notebooks, gpus, *, set_visible: bool) -> list[Result]:
    """One after another; after a failure the rest is skipped."""
    results = []
    for nb in notebooks:
        if results and results[-1].status != "ok":
            results.append(Result(nb.name, "-", "skipped"))
        else:
            results.append(runner.run(nb, gpus, set_visible=set_visible, staggered=False))
    return results


def _units(notebooks) -> list[list[Path]]:
    """The notebooks in runs that share a GPU: those of one :data:`SAME_RECORD` chain together (at
    the first one's place), every other alone."""
    units: list[list[Path]] = []
    chain_of = {name: i for i, chain in enumerate(SAME_RECORD) for name in chain}
    placed: dict[int, list[Path]] = {}
    for nb in notebooks:
        chain = chain_of.get(nb.stem)
        if chain is None:
            units.append([nb])
        elif chain in placed:
            placed[chain].append(nb)
        else:
            placed[chain] = [nb]
            units.append(placed[chain])
    return units


def _side_by_side(runner: _Runner, notebooks, gpus) -> list[Result]:
    """Each run of :func:`_units` on a GPU of its own, as many at once as there are GPUs, in order of
    the list (within a run, one after another; after a failure the rest of the run is skipped)."""
    free: queue.SimpleQueue[str] = queue.SimpleQueue()
    for gpu in gpus:
        free.put(gpu)

    def on_a_free_gpu(unit: list) -> list:
        gpu = free.get()  # never waits long: there are as many workers as GPUs
        try:
            results = []
            for nb in unit:
                if results and results[-1].status != "ok":
                    results.append(Result(nb.name, "-", "skipped"))
                else:
                    results.append(runner.run(nb, [gpu], set_visible=True, staggered=True))
            return results
        finally:
            free.put(gpu)

    pool = ThreadPoolExecutor(max_workers=len(gpus), thread_name_prefix="run_all")
    try:
        futures = [pool.submit(on_a_free_gpu, unit) for unit in _units(notebooks)]
        results = [r for f in futures for r in f.result()]
    except BaseException:  # Ctrl-C: the running notebooks get it too; start no other
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return results


def schedule(notebooks: Sequence[str | Path], gpus: Sequence[str], launch: Launcher, *, figures_dir: str | Path,
             logs_dir: str | Path, stagger: float = STAGGER_S, echo=print) -> list[Result]:
    """Run every notebook through ``launch`` (see :data:`Launcher`) and return one result per
    notebook, in the order given. With 2+ ``gpus``: the single-GPU notebooks side by side, then those
    of :data:`MULTI_GPU` in order on all GPUs (skipped where a single-GPU one failed). Otherwise all
    in order in the inherited environment."""
    notebooks = [Path(nb) for nb in notebooks]
    Path(logs_dir).mkdir(parents=True, exist_ok=True)
    runner = _Runner(launch, Path(figures_dir), Path(logs_dir), stagger, echo)
    if len(gpus) < 2:
        return _in_order(runner, notebooks, list(gpus), set_visible=False)
    singles = [nb for nb in notebooks if not needs_all_gpus(nb)]
    multis = [nb for nb in notebooks if needs_all_gpus(nb)]
    done = _side_by_side(runner, singles, list(gpus)) if singles else []
    if all(r.status == "ok" for r in done):
        done += _in_order(runner, multis, list(gpus), set_visible=True)
    else:
        done += [Result(nb.name, "-", "skipped") for nb in multis]
    by_name = {r.notebook: r for r in done}
    return [by_name[nb.name] for nb in notebooks]


def summary_table(results: Sequence[Result]) -> str:
    """One line per notebook: name, GPU(s), seconds, status, figures written."""
    rows = [("notebook", "GPU", "seconds", "status", "figures")]
    rows += [(r.notebook, r.gpus, f"{r.seconds:.1f}" if r.status != "skipped" else "-", r.status,
              str(len(r.figures))) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {2, 4}  # numbers
    return "\n".join("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))
                               ).rstrip() for row in rows)


def failure_report(results: Sequence[Result], tail: int = LOG_TAIL_LINES) -> str:
    """For each failed notebook: the line naming it and its log, then the log's last ``tail`` lines."""
    parts = []
    for r in results:
        if r.status != "FAILED":
            continue
        parts.append(f"run_all.sh: FAILED in notebook {r.notebook} (log: {r.log})")
        lines = r.log.read_text(errors="replace").splitlines() if r.log and r.log.exists() else []
        parts.extend(lines[-tail:])
    return "\n".join(parts)


def papermill_launcher(output_dir: str | Path, papermill_args: Sequence[str]) -> Launcher:
    """Executes a notebook into ``output_dir`` with papermill, its output and errors into the log."""
    def launch(notebook: Path, env: Mapping[str, str], log: Path) -> int:
        cmd = [sys.executable, "-m", "papermill", "--no-progress-bar", "-k", "python3", str(notebook),
               str(Path(output_dir) / notebook.name), *papermill_args]
        with log.open("w") as f:
            return subprocess.run(cmd, env={**os.environ, **env}, stdout=f, stderr=subprocess.STDOUT).returncode
    return launch


def main(argv: Sequence[str] | None = None, launcher=None) -> int:
    """The command line (module docstring); ``launcher(output, papermill_args)`` builds the
    :data:`Launcher` (tests pass a fake). Returns 1 where a notebook failed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m fo_lib.run_all_schedule", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--output", type=Path, required=True, help="executed notebooks and their logs")
    parser.add_argument("--figures", type=Path, default=Path("figures"), help="where the notebooks save figures")
    parser.add_argument("--stagger", type=float, default=STAGGER_S, help="seconds between parallel kernel starts")
    args = parser.parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)
    gpus = list_gpus()
    if len(gpus) >= 2:
        multi = [nb.stem for nb in args.notebooks if needs_all_gpus(nb)]
        print(f"[run_all] {len(gpus)} GPUs ({','.join(gpus)}): single-GPU notebooks side by side"
              + (f", then {', '.join(multi)} on all of them" if multi else ""), flush=True)
    launch = (launcher or papermill_launcher)(args.output, extra)
    results = schedule(args.notebooks, gpus, launch, figures_dir=args.figures, logs_dir=args.output,
                       stagger=args.stagger, echo=lambda line: print(line, flush=True))
    print(summary_table(results), flush=True)
    report = failure_report(results)
    if report:
        print(report, file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
