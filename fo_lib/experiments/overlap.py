"""Partition design space, predictive search and speedups, from the overlap benchmark's records.

Measuring these needs ``scripts/bench_overlap.py`` on a GPU (one call writes all three files);
here they are loaded and summarised. The search-time comparison runs live (CPU only).
"""
from __future__ import annotations

import ast
import time

import numpy as np
import pandas as pd

from . import load

PAPER = {"finest_best_share": 0.04, "finest_mean_loss": 0.1734, "predictor_error": 0.0341,
         "chosen_of_best": 0.99, "speedup_4090": 1.65, "speedup_a800": 1.30}


def speedups(data_set: str = "h200"):
    return load(data_set, "overlap_loopback")


def candidates(data_set: str = "h200"):
    df, meta = load(data_set, "overlap_loopback_candidates")
    df["part"] = df.partition.map(lambda s: tuple(ast.literal_eval(s)))
    df["waves"] = df.part.map(sum)
    df["shape"] = df.M.astype(str) + "x" + df.N.astype(str) + "x" + df.K.astype(str)
    return df, meta


def finest_statistic(df: pd.DataFrame) -> pd.DataFrame:
    """Per shape: is the finest partition (one wave per group) the best measured, and its loss."""
    rows = []
    for (prim, shape), g in df.groupby(["primitive", "shape"]):
        T = int(g.waves.iloc[0])
        finest = g[g.part == (1,) * T]
        if finest.empty:
            continue
        best = g.measured_ms.min()
        rows.append(dict(primitive=prim, shape=shape, waves=T, candidates=len(g),
                         finest_is_best=bool(finest.measured_ms.iloc[0] <= best * 1.0001),
                         finest_loss=float(finest.measured_ms.iloc[0] / best - 1)))
    return pd.DataFrame(rows)


def predictor_accuracy(df: pd.DataFrame) -> pd.DataFrame:
    """Per shape: mean |predicted - measured| / measured over all candidates, and how the
    partition the model ranks first among the measured ones compares with the best measured."""
    rows = []
    for (prim, shape), g in df.groupby(["primitive", "shape"]):
        chosen = g.loc[g.model_ms.idxmin()]
        rows.append(dict(primitive=prim, shape=shape, candidates=len(g),
                         mean_error=float((abs(g.model_ms - g.measured_ms) / g.measured_ms).mean()),
                         chosen=str(list(chosen.part)), chosen_of_best=float(g.measured_ms.min() / chosen.measured_ms)))
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
