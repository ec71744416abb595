"""Partition design space, predictive search and speedups, from the overlap benchmark's records.

Measuring these needs a GPU (:mod:`.overlap_measure`, run by ``scripts/bench/bench_overlap.py``; one call
writes all three files); here they are loaded and summarised, and :func:`run` is the notebooks'
entry point. The search-time comparison runs live (CPU only).
"""
from __future__ import annotations

import ast
import json
import time

import numpy as np
import pandas as pd

from .common import load
# The measuring half, re-exported: scripts and tests import these names from here.
from .measure_common import (LINK, LLAMA70B_TP8_SHAPES, PAPER_SHAPES, QUICK_SHAPES, SHAPES, _agree,  # noqa: F401
                             benchmark_routing, full_collective, link_label, measured_profile, routed_profile)
from .overlap_measure import (SUMMARY_COLUMNS, candidate_partitions, host_overhead, load_model_params,  # noqa: F401
                              measure, write_records)

PAPER = {"finest_best_share": 0.04, "finest_mean_loss": 0.1734, "predictor_error": 0.0341,
         "chosen_of_best": 0.99, "speedup_4090": 1.65, "speedup_a800": 1.30}


def record_name(data_set: str) -> str:
    """The overlap benchmark's record in a data set: ``overlap_nccl`` (measured on several GPUs) or
    ``overlap_loopback`` (one GPU, emulated link)."""
    from ..provenance import DATA_DIR
    return "overlap_nccl" if (DATA_DIR / data_set / "overlap_nccl.csv").exists() else "overlap_loopback"


def speedups(data_set: str = "h200"):
    return load(data_set, record_name(data_set))


def candidates(data_set: str = "h200"):
    df, meta = load(data_set, record_name(data_set) + "_candidates")
    df["part"] = df.partition.map(lambda s: tuple(ast.literal_eval(s)))
    df["waves"] = df.part.map(sum)
    df["shape"] = df.M.astype(str) + "x" + df.N.astype(str) + "x" + df.K.astype(str)
    if "nccl_max_ctas" in df and df.nccl_max_ctas.nunique() > 1:  # one sweep per NCCL CTA budget
        df["shape"] += " @" + df.nccl_max_ctas.astype(str) + " CTAs"
    return df, meta


def profiles_and_curves(data_dir, record: str) -> tuple[dict, dict]:
    """The GEMM profiles and link curves a sweep recorded in ``<data_dir>/<record>_profiles.json``:
    ``{(budget, primitive, M, N, K): GemmProfile}`` and ``{(budget, primitive): BandwidthCurve}``.
    A record without NCCL CTA budgets (one GPU) counts as budget 0; the copy-engine sweep of
    ``bench_nccl.py --copy-engine`` has the budget ``"copy_engine"`` (see :func:`budget_key`)."""
    from pathlib import Path

    from ..records import bundle

    return bundle(Path(data_dir) / f"{record}_profiles.json")


def budget_key(row) -> int | str:
    """The key of a sweep row's profiles in :func:`profiles_and_curves`: its NCCL CTA budget, or
    ``"copy_engine"`` for a row of the copy-engine sweep (``copy_engine`` column true)."""
    ce = getattr(row, "copy_engine", False)  # NaN in rows of records made before the column existed
    return "copy_engine" if isinstance(ce, (bool, np.bool_)) and ce else int(row.nccl_max_ctas)


def finest_statistic(df: pd.DataFrame, measured: str = "measured_ms") -> pd.DataFrame:
    """Per shape: is the finest partition (one wave per group) the best measured, and its loss.
    ``measured``: the column to compare (``measured_graph_ms``: the CUDA-graph replays)."""
    rows = []
    for (prim, shape), g in df.dropna(subset=[measured]).groupby(["primitive", "shape"]):
        T = int(g.waves.iloc[0])
        finest = g[g.part == (1,) * T]
        if finest.empty:
            continue
        best = g[measured].min()
        rows.append(dict(primitive=prim, shape=shape, waves=T, candidates=len(g),
                         finest_is_best=bool(finest[measured].iloc[0] <= best * 1.0001),
                         finest_loss=float(finest[measured].iloc[0] / best - 1)))
    return pd.DataFrame(rows)


def predictor_accuracy(df: pd.DataFrame, measured: str = "measured_ms") -> pd.DataFrame:
    """Per shape: mean |predicted - measured| / measured over all candidates, and how the
    partition the model ranks first among the measured ones compares with the best measured.
    ``measured``: the column to compare with (``measured_graph_ms``: the CUDA-graph replays)."""
    rows = []
    for (prim, shape), g in df.dropna(subset=[measured]).groupby(["primitive", "shape"]):
        chosen = g.loc[g.model_ms.idxmin()]
        meas = g[measured]
        rows.append(dict(primitive=prim, shape=shape, candidates=len(g),
                         mean_error=float((abs(g.model_ms - meas) / meas).mean()),
                         chosen=str(list(chosen.part)), chosen_of_best=float(meas.min() / chosen[measured])))
    return pd.DataFrame(rows)


def search_time(waves=(4, 8, 12, 14, 16, 64, 128, 200), brute_force_limit: int = 16, repeats: int = 3) -> pd.DataFrame:
    """Wall time of the exact DP vs enumerating every partition (live, CPU)."""
    from .. import partition as P
    from ..predictor import synthetic_model
    from ..profiles import BandwidthCurve

    sizes = np.logspace(3, 10, 29)
    curve = BandwidthCurve(tuple((float(b), 0.015 + b / 150e6) for b in sizes))
    rows = []
    for T in waves:
        m = synthetic_model(T, 0.05, 4_000_000, curve, "refined")
        t0 = time.perf_counter()
        for _ in range(repeats):
            m.tune()
        dp = (time.perf_counter() - t0) / repeats * 1e3
        bf = float("nan")
        if T <= brute_force_limit:
            t0 = time.perf_counter()
            P.brute_force(m._wave_ends, m.comm_ms)
            bf = (time.perf_counter() - t0) * 1e3
        rows.append(dict(waves=T, candidates=2 ** (T - 1), dp_ms=dp, brute_force_ms=bf))
    return pd.DataFrame(rows)


def run(mode: str = "auto", data_set: str = "h200", quick: bool = False) -> str:
    """Measure and record the overlap benchmark (GPU) or keep the recorded one; returns the data set
    the loaders above should read."""
    from .common import measured_set, resolve_mode
    from ..provenance import DATA_DIR

    if resolve_mode(mode) != "measure":
        return data_set
    summary, cands, saved = measure(quick=quick)
    tag = measured_set(quick)
    write_records(summary, cands, saved, DATA_DIR / tag / "overlap_loopback.csv", world=2, comm_sms=4)
    return tag
