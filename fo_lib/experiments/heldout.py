"""The predictor on shapes it has never seen: a seeded random set of GEMM shapes that no benchmark or
test uses, every partition of their waves measured over the emulated link
(:func:`fo_lib.experiments.overlap_measure.measure`) beside the refined model's prediction with this
GPU's fitted constants (:func:`fo_lib.store.model_params`), summarised as the paper
states its predictor's quality: the mean relative error over every measured partition, and the
chosen partition's measured time against the best measured (Fig. 15: 3.41 % mean error, the chosen
partition above 99 % of the best).

``scripts/bench/bench_predictor_heldout.py`` runs it on a GPU; :func:`draw_shapes` and
:func:`summarize` are pure.
"""
from __future__ import annotations

import numpy as np

# Shapes from 1024 to 16384 in steps of 256 (whole 128-row tiles and 64-deep k-blocks, as layer
# widths are), with at most MAX_WAVES waves so that every partition is timed (2^(T-1) of them).
LOW, HIGH, STEP = 1024, 16384, 256
MAX_WAVES = 10
MIN_WAVES = 2  # one wave has a single partition: nothing to choose


def known_shapes() -> set:
    """Every (M, N, K) a benchmark, a figure or the tile table's grids time: never held out."""
    from . import gemm_llm
    from .measure_common import QUICK_SHAPES, SHAPES
    shapes = {tuple(s) for s in SHAPES + QUICK_SHAPES}
    shapes |= {tuple(s[1:]) for s in gemm_llm.SHAPES}
    return shapes


def draw_shapes(seed: int, count: int, waves_of, *, max_waves: int = MAX_WAVES, tries: int = 10_000) -> list:
    """``count`` distinct ``(M, N, K)`` drawn uniformly on the grid of :data:`STEP` from
    :data:`LOW` to :data:`HIGH`, with ``MIN_WAVES <= waves_of(M, N, K) <= max_waves``, none of
    :func:`known_shapes`; the same ``seed``, the same shapes."""
    rng = np.random.default_rng(seed)
    known, out = known_shapes(), []
    steps = (HIGH - LOW) // STEP + 1
    for _ in range(tries):
        shape = tuple(int(LOW + STEP * x) for x in rng.integers(0, steps, size=3))
        if shape in known or shape in out:
            continue
        if MIN_WAVES <= waves_of(*shape) <= max_waves:
            out.append(shape)
            if len(out) == count:
                return out
    raise ValueError(f"only {len(out)} of {count} shapes of {MIN_WAVES}-{max_waves} waves in {tries} draws")


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share theirs), as Spearman's correlation takes them."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    for value in np.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(a, b) -> float:
    """Spearman's rank correlation of two equally long sequences (nan where one is constant)."""
    ra, rb = _ranks(np.asarray(a, float)), _ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def shape_summary(cands) -> dict:
    """One shape's measured partitions (rows: partition, measured_ms, model_ms) in numbers: their
    count, the rank correlation of predicted and measured, the mean relative error, the model's
    choice (lowest predicted) and the best measured with their times, chosen / best."""
    chosen = cands.loc[cands.model_ms.idxmin()]
    best = cands.loc[cands.measured_ms.idxmin()]
    return dict(partitions=len(cands), spearman=spearman(cands.model_ms, cands.measured_ms),
                mean_abs_error=float(((cands.model_ms - cands.measured_ms).abs() / cands.measured_ms).mean()),
                chosen=chosen.partition, chosen_ms=float(chosen.measured_ms), best=best.partition,
                best_ms=float(best.measured_ms), chosen_over_best=float(chosen.measured_ms / best.measured_ms))


def summarize(cands, worst_ratio: float = 0.99):
    """``(per_shape, overall)`` from the measured candidates (one row per partition: primitive, M, N,
    K, partition, measured_ms, model_ms): per (primitive, shape) :func:`shape_summary` and
    ``best_over_chosen`` (the best measured over the chosen partition's time, 1 when the model chose
    the best), and overall the mean error, the mean and worst of that ratio and the share of shapes
    at ``worst_ratio`` or more."""
    import pandas as pd

    rows = []
    for (prim, M, N, K), g in cands.groupby(["primitive", "M", "N", "K"], sort=True):
        s = shape_summary(g)
        rows.append(dict(primitive=prim, M=M, N=N, K=K, **s, best_over_chosen=1.0 / s["chosen_over_best"]))
    per_shape = pd.DataFrame(rows)
    ratio = per_shape.best_over_chosen
    overall = dict(shapes=len(per_shape), mean_abs_error=float(per_shape.mean_abs_error.mean()),
                   best_over_chosen_mean=float(ratio.mean()), best_over_chosen_worst=float(ratio.min()),
                   share_at_least=float((ratio >= worst_ratio).mean()), worst_ratio=worst_ratio)
    return per_shape, overall


def sweep_waves(M: int, N: int, K: int, comm_sms: int = 4) -> int:
    """The waves of ``M x N x K`` as the overlap sweep runs it on this GPU: the default config on the
    SMs the emulated link leaves (``comm_sms``: its footprint)."""
    from .. import gemm
    sms = gemm.sm_count()
    ctas = sms - comm_sms
    return gemm.auto_config(M, N, K, sms).for_ctas(ctas).grid(M, N, ctas).num_waves


def overall_line(overall: dict) -> str:
    return (f"held-out shapes: {overall['shapes']}; model mean error {overall['mean_abs_error']:.2%} (paper 3.41 %); "
            f"chosen at {overall['best_over_chosen_mean']:.1%} of the best measured on average, worst "
            f"{overall['best_over_chosen_worst']:.1%}; {overall['share_at_least']:.0%} of shapes at "
            f"{overall['worst_ratio']:.0%} or more (paper: > 99 %)")
