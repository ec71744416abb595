"""Fig. 15: the predictor's error over every measured candidate partition, and how the partition it
chooses compares with the best one measured.

The overlap sweeps record, per (primitive, shape) case, several candidate partitions, each with the
refined model's latency (``model_ms``) and its measured time, eager (``measured_ms``: the host
launches every group's wait and collective) and replayed as one CUDA graph (``measured_graph_ms``:
device time only). Here those records are read (:func:`fo_lib.experiments.overlap.candidates`) and
compared; :func:`run` in measure mode runs the one-GPU sweep again first
(:func:`fo_lib.experiments.overlap.run`). Multi-GPU records come from notebook 08
(``scripts/bench/bench_nccl.py`` under torchrun).
"""
from __future__ import annotations

import ast
import json

import numpy as np
import pandas as pd

from . import multi_gpu, overlap
from .common import resolve_mode

# Paper §6.5 / Fig. 15: > 250 (shape, partition, parallelism) combinations per GPU type; the mean
# error; the searched partition reaches > 99% of the best measured one. The counts and the
# chosen/best share are lower bounds ("> 250", "> 99%").
PAPER = pd.DataFrame([
    dict(data="paper: RTX 4090 (PCIe)", timing="-", candidates=250, mean_error=0.0341, chosen_of_best_mean=0.99),
    dict(data="paper: A800 (NVLink)", timing="-", candidates=250, mean_error=0.0344, chosen_of_best_mean=0.99),
])
TIMINGS = {"measured_graph_ms": "CUDA graph", "measured_ms": "eager"}
# What identifies one measured case in the records (copy_engine only in newer ones).
CASE_KEYS = ("primitive", "M", "N", "K", "nccl_max_ctas", "copy_engine")


def run(mode: str = "auto", data_set: str = "h200", quick: bool = False) -> list[str]:
    """The data sets to compare: the one-GPU sweep (measured now in measure mode, see
    :func:`fo_lib.experiments.overlap.run`, else the recorded ``data_set``), the same sweep recorded on
    other GPUs, then the recorded multi-GPU sweeps, a fresh one of this machine's GPUs first where
    notebook 08 just measured it."""
    from .common import measured_set, other_gpus
    from ..provenance import DATA_DIR

    sets = [overlap.run(mode, data_set, quick)]
    # The same one-GPU sweep recorded on other GPUs: the model's constants are fitted per GPU.
    sets += other_gpus("overlap_loopback_candidates", overlap.candidates(sets[0])[1])
    multi = multi_gpu.data_sets()
    gpus = multi_gpu.gpu_count()
    if resolve_mode(mode) == "measure" and gpus >= 2:
        fresh = measured_set(quick, world=gpus)
        if (DATA_DIR / fresh / "overlap_nccl_candidates.csv").exists():
            multi = [fresh] + [s for s in multi if s != fresh]
    return sets + multi


def case_labels(df: pd.DataFrame) -> pd.DataFrame:
    """The candidates with one ``shape`` label per measured case: the loader's label, plus the link
    mode where a record holds both (``copy_engine`` true and false)."""
    df = df.copy()
    if "copy_engine" in df and df.copy_engine.nunique() > 1:
        df["shape"] = df["shape"] + np.where(df.copy_engine.astype(bool), " (copy engine)", "")
    return df


def recorded(data_set: str) -> tuple[pd.DataFrame, pd.DataFrame | None, dict]:
    """A data set's candidates (labelled by :func:`case_labels`), its sweep summary (which holds the
    tuner's pick, ``predicted_partition``; None where it is missing) and the provenance."""
    df, meta = overlap.candidates(data_set)
    try:
        summary, _ = overlap.speedups(data_set)
    except FileNotFoundError:
        summary = None
    return case_labels(df), summary, meta


def relative_errors(df: pd.DataFrame, measured: str = "measured_ms") -> pd.Series:
    """``|predicted - measured| / measured`` per candidate with a ``measured`` time."""
    d = df.dropna(subset=[measured, "model_ms"])
    return (d.model_ms - d[measured]).abs() / d[measured]


def cdf(values) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF: the sorted values and the share of values at or below each."""
    x = np.sort(np.asarray(values, dtype=float))
    return x, np.arange(1, len(x) + 1) / max(len(x), 1)


def chosen_vs_best(df: pd.DataFrame, summary: pd.DataFrame | None = None,
                   measured: str = "measured_ms") -> pd.DataFrame:
    """Per case (:func:`fo_lib.experiments.overlap.predictor_accuracy`): the chosen partition's
    measured time against the best measured one. The chosen one is the tuner's pick where the sweep's
    summary records it and it was measured (``chosen_by="tuner"``), else the partition the model
    ranks first among the measured ones (``"model"``; the two differ only in ties and where the tuner
    ran a routed All-to-All profile)."""
    acc = overlap.predictor_accuracy(df, measured).assign(chosen_by="model")
    if summary is None or "predicted_partition" not in summary or acc.empty:
        return acc
    keys = [k for k in CASE_KEYS if k in df and k in summary]
    picks = summary[keys + ["predicted_partition"]].merge(df[keys + ["shape"]].drop_duplicates(), on=keys)
    picks = picks.assign(part=picks.predicted_partition.map(lambda s: tuple(ast.literal_eval(s))))
    timed = df.dropna(subset=[measured])
    best = timed.groupby(["primitive", "shape"])[measured].min()
    mine = picks.merge(timed[["primitive", "shape", "part", measured]], on=["primitive", "shape", "part"])
    acc = acc.set_index(["primitive", "shape"])
    for r in mine.itertuples(index=False):
        key = (r.primitive, r.shape)
        acc.loc[key, ["chosen", "chosen_by"]] = [str(list(r.part)), "tuner"]
        acc.loc[key, "chosen_of_best"] = best[key] / getattr(r, measured)
    return acc.reset_index()


def accuracy(df: pd.DataFrame, summary: pd.DataFrame | None = None, measured: str = "measured_ms") -> dict:
    """One data set's row of the comparison: the error over every measured candidate and the
    chosen/best ratio over its cases."""
    err = relative_errors(df, measured)
    d = df.dropna(subset=[measured, "model_ms"])
    per = chosen_vs_best(df, summary, measured)
    return dict(timing=TIMINGS.get(measured, measured), candidates=len(err), cases=len(per),
                mean_error=float(err.mean()), median_error=float(err.median()),
                p90_error=float(err.quantile(0.9)),
                measured_above_model=float((d[measured] > d.model_ms).mean()),
                chosen_of_best_mean=float(per.chosen_of_best.mean()),
                chosen_of_best_worst=float(per.chosen_of_best.min()),
                chosen_within_1pct=float((per.chosen_of_best >= 0.99).mean()),
                chosen_by_tuner=float((per.chosen_by == "tuner").mean()))


def uncalibrated(summary: pd.DataFrame | None) -> bool:
    """Whether a sweep predicted with the model's default constants (no ``comm_slowdown`` fitted for
    its GPU, as in the sweep ``calibrate`` runs before it fits them): its error is the model's before
    calibration."""
    params = summary.model_params.dropna() if summary is not None and "model_params" in summary else ()
    return len(params) > 0 and not params.map(lambda s: "comm_slowdown" in json.loads(s)).any()


def label(meta: dict, summary: pd.DataFrame | None = None, prefix: str = "ours: ") -> str:
    tail = ", default model constants" if uncalibrated(summary) else ""
    return f"{prefix}{str(meta.get('gpu', '?')).replace('NVIDIA ', '')}, {meta.get('link', '?')}{tail}"


def table(data_sets) -> pd.DataFrame:
    """The paper's numbers, then ours per data set and timing (CUDA graph, eager)."""
    rows = []
    for ds in data_sets:
        df, summary, meta = recorded(ds)
        for measured in TIMINGS:
            if measured in df and df[measured].notna().any():
                rows.append(dict(data=label(meta, summary), data_set=ds, **accuracy(df, summary, measured)))
    return pd.concat([PAPER, pd.DataFrame(rows)], ignore_index=True)


def side_by_side(t: pd.DataFrame) -> pd.DataFrame:
    """:func:`table` for reading: percentages, and the paper's lower bounds as "> 250", "> 99%"."""
    paper = t.data.str.startswith("paper")

    def pct(col, bound=False):
        return [(f"> {v:.0%}" if bound and p else f"{v:.2%}") if pd.notna(v) else "" for v, p in zip(t[col], paper)]

    return pd.DataFrame({
        "data": t.data, "timing": t.timing,
        "candidates": [f"> {v:.0f}" if p else f"{v:.0f}" for v, p in zip(t.candidates, paper)],
        "mean error": pct("mean_error"), "median error": pct("median_error"),
        "measured > predicted": pct("measured_above_model"),
        "chosen / best (mean)": pct("chosen_of_best_mean", bound=True),
        "chosen / best (worst)": pct("chosen_of_best_worst"),
    })
