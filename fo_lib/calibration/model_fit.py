"""The refined model's constants fitted on measured partitions (the offline phase's last step).

From an overlap sweep's records (``<record>_candidates.csv``: every candidate partition's measured
latency; ``<record>_profiles.json``: the GEMM profiles and link curves it used), fit ``launch_ms``,
``comm_slowdown`` and ``gemm_slowdown`` per primitive (:func:`fo_lib.predictor.calibrate`) on all
shapes (what later tuning uses), and report per shape the error of a fit that left that shape out
and whether the partition that fit ranks first is the best measured.
"""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

# A wider grid than the predictor's default: NCCL calls cost far more per group than the loopback's.
GRID = {"launch_ms": (0.0, 0.01, 0.02, 0.05, 0.1, 0.16, 0.25, 0.35),
        "comm_slowdown": (1.0, 1.1, 1.2, 1.35, 1.5, 1.7, 2.0, 2.5, 3.0),
        "gemm_slowdown": (1.0, 1.03, 1.06),
        "contention": ("uniform",)}


def load(data: Path, record: str):
    """Candidates, curves and profiles keyed by (budget, primitive[, M, N, K]); a record without CTA
    budgets (one GPU) counts as budget 0."""
    import pandas as pd

    from ..records import bundle

    cand = pd.read_csv(Path(data) / f"{record}_candidates.csv")
    if "nccl_max_ctas" not in cand:
        cand["nccl_max_ctas"] = 0
    profiles, curves = bundle(Path(data) / f"{record}_profiles.json")
    return cand, curves, profiles


def fit(data, record: str = "overlap_loopback", *, contention: str = "uniform", mode: str = "eager",
        leave_one_out: bool = True, progress=None):
    """``(rows, fitted)``: one row per (primitive, shape, budget) of the leave-one-shape-out check,
    and ``{primitive: params}`` fitted on every shape. ``mode``: ``"graph"`` fits the CUDA-graph
    replays (records that have them). ``leave_one_out=False``: each shape's row reads the fit on
    every shape (one grid search per primitive instead of one per shape: what ``calibrate`` runs;
    the held-out check is this script's). ``progress``: called once per primitive."""
    import pandas as pd

    from ..predictor import OverlapModel, calibrate

    grid = dict(GRID, contention=(contention,))
    cand, curves, profiles = load(Path(data), record)
    cand["part"] = cand.partition.map(lambda s: tuple(ast.literal_eval(s)))
    if mode == "graph":
        if "measured_graph_ms" not in cand:
            raise ValueError(f"{record}_candidates.csv has no CUDA-graph measurements (measured_graph_ms)")
        cand = cand.dropna(subset=["measured_graph_ms"]).assign(measured_ms=lambda d: d.measured_graph_ms)
    rows, fitted = [], {}
    for prim, pdf in cand.groupby("primitive"):
        def samples(keep):
            return [(profiles[(r.nccl_max_ctas, prim, r.M, r.N, r.K)], curves[(r.nccl_max_ctas, prim)], r.part,
                     r.measured_ms) for r in pdf.itertuples() if keep((r.M, r.N, r.K))]

        fitted[prim] = calibrate(samples(lambda s: True), grid)[0]
        loo = {}  # leave-one-shape-out fit, once per shape (all budgets of the shape left out)
        for shape, budget in sorted({((r.M, r.N, r.K), r.nccl_max_ctas) for r in pdf.itertuples()}):
            if shape not in loo:
                # One shape alone leaves nothing to fit on: that shape then reads the all-shapes fit.
                others = samples(lambda s: s != shape) if leave_one_out else []
                loo[shape] = calibrate(others, grid) if others else (fitted[prim], float("nan"))
            params, train_err = loo[shape]
            test = pdf[(pdf.M == shape[0]) & (pdf.N == shape[1]) & (pdf.K == shape[2]) & (pdf.nccl_max_ctas == budget)]
            model = OverlapModel(profiles[(budget, prim, *shape)], curves[(budget, prim)], "refined", **params)
            rows.append(_row(prim, shape, budget, test, model, params, train_err))
        if progress is not None:
            progress()
    return pd.DataFrame(rows), fitted


def _row(prim, shape, budget, test, model, params, train_err) -> dict:
    pred = np.array([model.predict(p).total_ms for p in test.part])
    meas = test.measured_ms.to_numpy()
    chosen = int(np.argmin(pred))
    best = float(meas.min())
    tuned = model.tune()
    # What the tuner runs: the model's best measured candidate, or the sequential fallback
    # (cuBLAS then the collective) when the model predicts that no partition beats it.
    overlaps = pred[chosen] < tuned.no_overlap.total_ms
    seq = float(test.sequential_ms.iloc[0])
    return dict(primitive=prim, M=shape[0], N=shape[1], K=shape[2], nccl_max_ctas=budget,
                candidates=len(test), tuner_overlaps=bool(overlaps),
                tuned_ms=float(meas[chosen]) if overlaps else seq, sequential_ms=seq,
                **{f"fit_{k}": v for k, v in params.items()}, train_error=train_err,
                mean_abs_error=float(np.mean(np.abs(pred - meas) / meas)),
                uncalibrated_error=float(np.mean(np.abs(test.model_ms - meas) / meas)),
                chosen=str(list(test.part.iloc[chosen])), chosen_ms=float(meas[chosen]),
                best=str(list(test.part.iloc[int(np.argmin(meas))])), best_ms=best,
                chosen_vs_best=float(meas[chosen] / best),
                dp_choice_all_partitions=str(list(tuned.choice.partition)),
                dp_choice_was_measured=tuned.choice.partition in set(test.part))


def write(rows, fitted, out, meta: dict, record: str) -> Path:
    """The fit as a record: ``out`` (the per-shape rows) with the fitted constants in its sidecar
    (``fitted_on_all_shapes``, what :func:`fo_lib.store.model_params` reads)."""
    from ..provenance import write_result

    return write_result(rows, out, link=meta.get("link", "?"), world_size=meta.get("world_size", 1),
                        derived_from=[f"{record}_candidates.csv", f"{record}_profiles.json"],
                        note="offline: leave-one-shape-out calibration of the refined model on measured partitions",
                        fitted_on_all_shapes=fitted)
