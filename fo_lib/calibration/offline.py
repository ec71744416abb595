"""``python -m fo_lib calibrate``: the paper's offline phase for the GPU it runs on, in one command.

Parts, in order (each needs the ones before it on the same GPU):

* ``tiles``: the Hopper GEMM's tile table (:mod:`.sm90_tiles`); sm_90 only (the portable family of
  sm80-89 picks its config from the wave count, with no table);
* ``overlap``: an overlap sweep over the emulated link (:func:`fo_lib.experiments.overlap_measure.measure`):
  the GEMM wave profiles, the link curve of each primitive and every candidate partition measured;
* ``model``: the refined model's constants fitted on those partitions (:mod:`.model_fit`);
* ``nccl``: NCCL latency curves and the collectives' SM footprint at each world size, which needs two
  GPUs or more (``scripts/bench/bench_nccl.py`` under torchrun records them today).

Results go to :func:`fo_lib.store.calibration_dir` (``--record``: also to the
repository's ``data/<gpu>/``, ``data/<gpu>-quick/`` for ``--quick``), each part's files moved in as
it ends; ``calibration.json`` there says which parts are done, so a killed run resumes at the
first unfinished part (``--force`` measures everything again).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .._util import atomic_path, atomic_write
from .. import store

PARTS = ("tiles", "overlap", "model", "nccl")
MANIFEST = "calibration.json"
# --quick: the tile table at two K (the picker extrapolates past them) and a shorter overlap sweep.
QUICK_TILES_K = (1024, 8192)


class CalibrationError(RuntimeError):
    """A part that cannot run here, named with what it needs."""


@dataclass
class Context:
    gpu: str
    folder: Path   # where finished parts are, and are read from
    out: Path      # where the running part writes: moved into ``folder`` when it ends
    quick: bool
    echo: object


def _files(part: str) -> tuple[str, ...]:
    """The records a part writes (each CSV with its ``.meta.json``)."""
    return {"tiles": (store.TILES,), "overlap": (store.OVERLAP, store.CANDIDATES, store.PROFILES),
            "model": (store.MODEL,), "nccl": (store.NCCL_CURVES,)}[part]


def why_not(part: str, ctx: Context) -> str | None:
    """Why ``part`` does not run on this machine, or None."""
    import torch

    if part == "tiles":
        from ..gemm import sm90
        return None if sm90.is_supported() else "not a Hopper GPU: the portable family picks configs without a table"
    if part == "model" and not (ctx.folder / store.CANDIDATES).is_file():  # (overlap moved in by now)
        return "no overlap sweep to fit on (run the overlap part first)"
    if part == "nccl" and torch.cuda.device_count() < 2:
        return (f"{torch.cuda.device_count()} GPU visible: NCCL curves need two or more "
                "(scripts/bench/bench_nccl.py under torchrun)")
    if part == "nccl":
        return "several GPUs: record with scripts/bench/bench_nccl.py under torchrun (not yet a part of calibrate)"
    return None


def _run_tiles(ctx: Context, bar) -> None:
    from . import sm90_tiles
    ks = QUICK_TILES_K if ctx.quick else sm90_tiles.KS
    bar.reset(total=len(sm90_tiles.ASPECTS) * len(ks))
    sm90_tiles.record(ctx.out / store.TILES, ks, rounds=8 if ctx.quick else 12, progress=lambda: bar.update(),
                      echo=lambda line: None)


def _run_overlap(ctx: Context, bar) -> None:
    import pandas as pd

    from ..experiments.measure_common import QUICK_SHAPES
    from ..experiments.overlap_measure import measure, write_records
    prims = ("all_reduce", "reduce_scatter", "all_to_all")
    shapes = QUICK_SHAPES[:2] if ctx.quick else QUICK_SHAPES
    bar.reset(total=len(prims))
    saved_all = None
    rows, cands = [], []
    for prim in prims:  # one primitive at a time: the bar moves, and each keeps its own curve
        df, cand, saved = measure(world=2, quick=ctx.quick, primitives=(prim,), shapes=shapes,
                                  candidates_limit=6 if ctx.quick else 12, graphs=False)
        rows.append(df)
        cands.append(cand)
        if saved_all is None:
            saved_all = saved
        else:
            saved_all["profiles"] += saved["profiles"]
            saved_all["curves"].update(saved["curves"])
        bar.update()
    write_records(pd.concat(rows, ignore_index=True), pd.concat(cands, ignore_index=True), saved_all,
                  ctx.out / store.OVERLAP, world=2, comm_sms=int(saved_all["profiles"][0].get("comm_sms", 0)),
                  quick=ctx.quick)


def _run_model(ctx: Context, bar) -> None:
    from . import model_fit
    bar.reset(total=3)
    rows, fitted = model_fit.fit(ctx.folder, "overlap_loopback", contention="gemm_overlap", leave_one_out=False,
                                 progress=lambda: bar.update())
    meta = json.loads((ctx.folder / (Path(store.OVERLAP).stem + ".meta.json")).read_text())
    model_fit.write(rows, fitted, ctx.out / store.MODEL, meta, "overlap_loopback")
    ctx.echo(f"  model error on the measured partitions {rows.mean_abs_error.mean():.2%} (uncalibrated "
             f"{rows.uncalibrated_error.mean():.2%}); chosen / best measured: worst {rows.chosen_vs_best.max():.3f}")


RUNS = {"tiles": _run_tiles, "overlap": _run_overlap, "model": _run_model}


def _manifest(folder: Path) -> dict:
    try:
        doc = json.loads((folder / MANIFEST).read_text())
        return doc if isinstance(doc, dict) and isinstance(doc.get("parts"), dict) else {"parts": {}}
    except (OSError, ValueError):  # none yet, or cut short: every part counts as not done
        return {"parts": {}}


def done(folder: Path, part: str, quick: bool) -> bool:
    """Whether ``part`` finished in ``folder`` at least as thoroughly as asked (a quick run does not
    stand for a full one) and its files are all there."""
    entry = _manifest(folder)["parts"].get(part)
    return (isinstance(entry, dict) and (quick or not entry.get("quick", True))
            and all((folder / f).is_file() for f in _files(part)))


def calibrate(parts=PARTS, *, quick: bool = False, force: bool = False, record: bool = False,
              gpu: str | None = None, echo=print) -> dict:
    """Run the offline ``parts`` for this GPU; return ``{part: seconds, or the reason it was skipped}``.

    A part writes into a staging folder, moved beside the others when it ends: until then readers
    (other processes, the parts after it) see the last finished results, never a table half
    recorded. Before it runs, it and the parts after it (which read it) stop counting as done, so
    a run killed there redoes them. One calibration per GPU folder at a time (a file lock)."""
    from filelock import FileLock

    from ..provenance import gpu_tag
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"unknown calibration part(s) {unknown}: choose among {', '.join(PARTS)}")
    if gpu is None:
        import torch
        if not torch.cuda.is_available():
            raise CalibrationError("no CUDA GPU visible: calibrate measures the GPU it runs on")
        gpu = gpu_tag()
    folder = store.calibration_dir(gpu)
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".lock")):
        report = _calibrate(parts, Context(gpu, folder, folder / ".staging", quick, echo), force)
    store.forget_warnings()
    if record:
        copy_to_records(folder, gpu, quick, [p for p in parts if isinstance(report.get(p), float)
                                             or report.get(p) == "done earlier"], echo)
    return report


def _calibrate(parts, ctx: Context, force: bool) -> dict:
    from tqdm import tqdm

    ctx.echo(f"calibrating {ctx.gpu} into {ctx.folder}{' (quick)' if ctx.quick else ''}")
    report: dict = {}
    for part in (p for p in PARTS if p in parts):
        reason = why_not(part, ctx)
        if reason:
            report[part] = f"skipped: {reason}"
        elif done(ctx.folder, part, ctx.quick) and not force:
            report[part] = "done earlier"
        else:
            _forget(ctx.folder, PARTS[PARTS.index(part):])
            shutil.rmtree(ctx.out, ignore_errors=True)  # what a killed run left half written
            ctx.out.mkdir(parents=True)
            t0 = time.perf_counter()
            with tqdm(desc=part, unit="step", leave=False) as bar:
                RUNS[part](ctx, bar)
            for f in sorted(ctx.out.iterdir()):
                os.replace(f, ctx.folder / f.name)
            seconds = time.perf_counter() - t0
            _mark_done(ctx.folder, part, seconds, ctx.quick)
            report[part] = round(seconds, 1)
        shown = f"{report[part]:.1f} s" if isinstance(report[part], float) else report[part]
        ctx.echo(f"  {part:8s} {shown}")
    return report


def _forget(folder: Path, parts) -> None:
    manifest = _manifest(folder)
    if any(p in manifest["parts"] for p in parts):
        for p in parts:
            manifest["parts"].pop(p, None)
        atomic_write(folder / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())


def _mark_done(folder: Path, part: str, seconds: float, quick: bool) -> None:
    from ..provenance import git_sha
    manifest = _manifest(folder)
    manifest["parts"][part] = {"seconds": round(seconds, 1), "quick": quick, "git_sha": git_sha(),
                               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    atomic_write(folder / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())


def copy_to_records(folder: Path, gpu: str, quick: bool, parts, echo=print) -> Path:
    """Copy the finished ``parts``' files (and sidecars) into the repository's ``data/<gpu>/``
    (``data/<gpu>-quick/`` for a quick calibration: a quick record never lands in a full folder)."""
    dest = store.record_dir(gpu + ("-quick" if quick else ""))
    dest.mkdir(parents=True, exist_ok=True)
    for part in parts:
        for name in _files(part):
            for src in (folder / name, folder / (Path(name).stem + ".meta.json")):
                if src.is_file():
                    with atomic_path(dest / src.name) as tmp:
                        shutil.copyfile(src, tmp)
    echo(f"  recorded into {dest}")
    return dest
