"""Calibrate the refined latency model on measured partitions and evaluate the tuner, offline.

Reads what ``scripts/bench/bench_overlap.py`` recorded (``<data>/overlap_loopback_candidates.csv``
with the measured latency of every candidate partition, ``<data>/overlap_loopback_profiles.json`` with the
GEMM profiles and link curves), fits ``launch_ms``/``comm_slowdown``/``gemm_slowdown`` per
primitive, and reports per shape: the model's error over all measured candidates and whether the
partition the model ranks first (among the measured candidates) is within 3% of the best measured.
Leave-one-shape-out: the parameters used for a shape are fitted on the other shapes only.

    python scripts/record/calibrate_overlap.py [--data data/h200]

(The fit itself: fo_lib.calibration.model_fit, which ``python -m fo_lib calibrate`` also runs.)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib.calibration import model_fit  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/h200")
    ap.add_argument("--mode", choices=("eager", "graph"), default="eager",
                    help="fit to the eager calls or to the CUDA-graph replays (records that have them)")
    ap.add_argument("--record", default=None, help="overlap_nccl or overlap_loopback (default: what --data holds)")
    ap.add_argument("--contention", default="uniform", choices=("uniform", "gemm_overlap"),
                    help="how the refined model slows a collective beside the GEMM (fo_lib.predictor)")
    args = ap.parse_args(argv)
    data = Path(args.data)
    record = args.record or ("overlap_nccl" if (data / "overlap_nccl_candidates.csv").exists() else "overlap_loopback")
    try:
        df, fitted = model_fit.fit(data, record, contention=args.contention, mode=args.mode)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    meta = json.loads((data / f"{record}.meta.json").read_text())
    out = data / ("overlap_calibration.csv" if record == "overlap_loopback" else f"{record}_calibration.csv")
    if args.mode == "graph":
        out = out.with_name(out.stem + "_graph.csv")
    model_fit.write(df, fitted, out, meta, record)
    print(df[["primitive", "M", "K", "mean_abs_error", "uncalibrated_error", "chosen_vs_best", "fit_launch_ms",
              "fit_comm_slowdown", "fit_gemm_slowdown"]].round(3).to_string(index=False))
    print(f"mean model error {df.mean_abs_error.mean():.2%} (uncalibrated {df.uncalibrated_error.mean():.2%}); "
          f"chosen within 3% of the best measured in {(df.chosen_vs_best <= 1.03).mean():.0%} of shapes")
    print("fitted on all shapes (what later runs use):", json.dumps(fitted))


if __name__ == "__main__":
    main()
