"""Wall time of the exact partition search (dynamic program) for large wave counts.

Not a timed test: prints a table (median of repeats) and optionally writes CSV.
    python scripts/bench/bench_search.py [--repeats 20] [--out search.csv]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from fo_lib.predictor import synthetic_model  # noqa: E402
from fo_lib.profiles import BandwidthCurve  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--waves", type=int, nargs="+", default=[64, 128, 200])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out")
    args = ap.parse_args()
    # An H200-like NVLink AllReduce curve shape: 15 us floor, ~150 GB/s effective.
    sizes = np.logspace(3, 10, 29)
    curve = BandwidthCurve(tuple((float(b), 0.015 + b / 150e6) for b in sizes))
    rows = []
    for T in args.waves:
        for model in ("paper", "refined"):
            m = synthetic_model(T, 0.05, 4_000_000, curve, model)
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                res = m.tune()
                times.append((time.perf_counter() - t0) * 1e3)
            rows.append({"waves": T, "model": model, "median_ms": statistics.median(times),
                         "max_ms": max(times), "groups": len(res.choice.partition),
                         "candidates": f"2^{T - 1}"})
    print(f"{'T':>4} {'model':>8} {'median ms':>10} {'max ms':>8} {'groups':>6}  candidates")
    for r in rows:
        print(f"{r['waves']:>4} {r['model']:>8} {r['median_ms']:>10.2f} {r['max_ms']:>8.2f} {r['groups']:>6}  {r['candidates']}")
    if args.out:
        import pandas as pd

        from fo_lib._util import atomic_path
        with atomic_path(args.out) as tmp:  # an interrupted run leaves no truncated table
            pd.DataFrame(rows).to_csv(tmp, index=False)


if __name__ == "__main__":
    main()
