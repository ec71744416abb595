"""Does autotuning pick what the LLM benchmark measures as fastest? Each LLM shape's tuning shortlist
timed as autotuning times it and as the benchmark does, in one process
(:mod:`fo_lib.experiments.tuning_agreement`). Prints per shape autotuning's pick, the benchmark
regime's pick and what the first costs in the second regime. ~20 s on an H200 (10 rounds for the
benchmark regime).

    python scripts/bench/autotune_agreement.py --out /tmp/agree.csv
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fo_lib.experiments import tuning_agreement  # noqa: E402
from fo_lib.gemm import sm90  # noqa: E402
from fo_lib.provenance import write_result  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="CSV to write (a .meta.json sidecar goes beside it)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--inner", type=int, default=3, help="calls per CUDA graph")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", type=int, nargs="*", help="indices into gemm_llm.SHAPES (default all)")
    args = p.parse_args(argv)
    if not sm90.is_supported():
        sys.exit("autotune_agreement: needs a compute capability 9.0 GPU")

    def show(rows):
        s = tuning_agreement.summary(pd.DataFrame(rows)).iloc[0]
        print(f"{s.M:6d} {s.N:6d} {s.K:6d}  tuned {s.tune_pick:>22}  graph {s.graph_pick:>22}  "
              f"loss {s.pick_loss:.3f}", flush=True)

    rows = tuning_agreement.measure(args.rounds, args.inner, args.seed, args.only, on_shape=show)
    df = pd.DataFrame(rows, columns=tuning_agreement.COLUMNS)
    write_result(df, args.out, link="none", dtype="bf16", rounds=args.rounds, inner=args.inner, graph=True,
                 kernel="fo_lib.gemm.sm90")
    s = tuning_agreement.summary(df)
    geo = lambda v: math.exp(np.log(v.dropna()).mean()) if v.notna().any() else math.nan  # noqa: E731
    print(f"tuned pick / benchmark pick, in the benchmark's regime: geomean {geo(s.pick_loss):.4f}, worst "
          f"{s.pick_loss.max():.3f}, {int((s.tune_pick != s.graph_pick).sum())} of {len(s)} picks differ -> {args.out}")


if __name__ == "__main__":
    main()
