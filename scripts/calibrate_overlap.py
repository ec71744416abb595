"""Calibrate the refined latency model on measured partitions and evaluate the tuner, offline.

Reads what ``scripts/bench_overlap.py`` recorded (``<data>/overlap_loopback_candidates.csv`` with the
measured latency of every candidate partition, ``<data>/overlap_loopback_profiles.json`` with the
GEMM profiles and link curves), fits ``launch_ms``/``comm_slowdown``/``gemm_slowdown`` per
primitive, and reports per shape: the model's error over all measured candidates and whether the
partition the model ranks first (among the measured candidates) is within 3% of the best measured.
Leave-one-shape-out: the parameters used for a shape are fitted on the other shapes only.

    python scripts/calibrate_overlap.py [--data data/h200]
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fo_lib.predictor import OverlapModel, calibrate  # noqa: E402
from fo_lib.profiles import BandwidthCurve, GemmProfile  # noqa: E402
from fo_lib.provenance import write_result  # noqa: E402


def load(data: Path):
    cand = pd.read_csv(data / "overlap_loopback_candidates.csv")
    saved = json.loads((data / "overlap_loopback_profiles.json").read_text())
    curves = {k: BandwidthCurve.from_dict(v) for k, v in saved["curves"].items()}
    profiles = {}
    for d in saved["profiles"]:
        prim = d.pop("primitive")
        profiles[(prim, d["M"], d["N"], d["K"])] = GemmProfile.from_dict(d)
    return cand, curves, profiles


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/h200")
    args = ap.parse_args(argv)
    data = Path(args.data)
    cand, curves, profiles = load(data)
    cand["part"] = cand.partition.map(lambda s: tuple(ast.literal_eval(s)))
    rows = []
    for prim, pdf in cand.groupby("primitive"):
        shapes = sorted({(r.M, r.N, r.K) for r in pdf.itertuples()})
        for shape in shapes:
            train = [(profiles[(prim, *s)], curves[prim], r.part, r.measured_ms)
                     for s in shapes if s != shape for r in pdf[(pdf.M == s[0]) & (pdf.N == s[1]) & (pdf.K == s[2])].itertuples()]
            params, train_err = calibrate(train)
            test = pdf[(pdf.M == shape[0]) & (pdf.N == shape[1]) & (pdf.K == shape[2])]
            model = OverlapModel(profiles[(prim, *shape)], curves[prim], "refined", **params)
            pred = np.array([model.predict(p).total_ms for p in test.part])
            meas = test.measured_ms.to_numpy()
            chosen = int(np.argmin(pred))
            best = float(meas.min())
            tuned = model.tune()
            rows.append(dict(primitive=prim, M=shape[0], N=shape[1], K=shape[2], candidates=len(test),
                             **{f"fit_{k}": v for k, v in params.items()}, train_error=train_err,
                             mean_abs_error=float(np.mean(np.abs(pred - meas) / meas)),
                             uncalibrated_error=float(np.mean(np.abs(test.model_ms - meas) / meas)),
                             chosen=str(list(test.part.iloc[chosen])), chosen_ms=float(meas[chosen]),
                             best=str(list(test.part.iloc[int(np.argmin(meas))])), best_ms=best,
                             chosen_vs_best=float(meas[chosen] / best),
                             dp_choice_all_partitions=str(list(tuned.choice.partition)),
                             dp_choice_was_measured=tuned.choice.partition in set(test.part)))
    df = pd.DataFrame(rows)
    write_result(df, data / "overlap_calibration.csv", link="emulated (loopback, copy engine)",
                 derived_from=["overlap_loopback_candidates.csv", "overlap_loopback_profiles.json"],
                 note="offline: leave-one-shape-out calibration of the refined model on measured partitions")
    print(df[["primitive", "M", "K", "mean_abs_error", "uncalibrated_error", "chosen_vs_best", "fit_launch_ms",
              "fit_comm_slowdown", "fit_gemm_slowdown"]].round(3).to_string(index=False))
    print(f"mean model error {df.mean_abs_error.mean():.2%} (uncalibrated {df.uncalibrated_error.mean():.2%}); "
          f"chosen within 3% of the best measured in {(df.chosen_vs_best <= 1.03).mean():.0%} of shapes")


if __name__ == "__main__":
    main()
