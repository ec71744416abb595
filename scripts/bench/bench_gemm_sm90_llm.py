"""Benchmark the Hopper GEMM's picked config against torch.matmul (cuBLAS) on LLM projection shapes
(the bar: cuBLAS / ours geomean >= 1.00, median >= 1.00, worst >= 0.97).

The shapes, the variants timed per shape and how (interleaved rounds, random order, CUDA-graph
replays, inputs beyond the L2) are :mod:`fo_lib.experiments.gemm_llm`'s; this script runs them all,
prints one line per shape and the summary, and writes the CSV + provenance sidecar. The table:
data/<gpu>/gemm_sm90_tiles.csv, or ``--tiles PATH`` (sets ``FO_SM90_TILES``; ``guess`` for none).
~30-80 s on an H200 (the control variants included).

    python scripts/bench/bench_gemm_sm90_llm.py --out data/h200/gemm_sm90_llm.csv
    python scripts/bench/bench_gemm_sm90_llm.py --tiles /tmp/tiles.csv --rounds 10 --out /tmp/llm.csv
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fo_lib.experiments import gemm_llm  # noqa: E402
from fo_lib.experiments.gemm_llm import summary  # noqa: E402
from fo_lib.gemm import sm90, tile_table  # noqa: E402
from fo_lib.provenance import write_result  # noqa: E402

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="CSV to write (a .meta.json sidecar goes beside it)")
    p.add_argument("--tiles", help="tile table to pick from (sets FO_SM90_TILES; 'guess': none)")
    p.add_argument("--rounds", type=int, default=gemm_llm.FULL["rounds"])
    p.add_argument("--inner", type=int, default=gemm_llm.FULL["inner"], help="calls per CUDA graph")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", type=int, nargs="*", help="indices into SHAPES (default all)")
    p.add_argument("--cluster", action=argparse.BooleanOptionalAction, default=gemm_llm.FULL["cluster"],
                   help="also time the pick's tile with the other cluster choice (columns twin_config, twin_ms)")
    p.add_argument("--control", action=argparse.BooleanOptionalAction, default=gemm_llm.FULL["control"],
                   help="also time ours and cuBLAS again, each in a graph of its own (columns ours_again_ms, "
                        "cublas_again_ms): how far two timings of the same calls differ in one process")
    args = p.parse_args(argv)
    if args.tiles:
        os.environ[tile_table.ENV_VAR] = args.tiles
    if not sm90.is_supported():
        sys.exit("bench_gemm_sm90_llm: needs a compute capability 9.0 GPU")
    table = tile_table.table_path()
    print(f"tile table: {table or 'none: the table-free guess'}", flush=True)
    print(f"{'origin':>32} {'M':>6} {'N':>6} {'K':>6} {'config':>18} {'cuBLAS/ours':>11} {'sig%':>6} "
          f"{'alt':>18} {'alt/ours':>8} {'pred/meas':>9}", flush=True)

    def show(row, ms, pred):
        print(f"{row['origin']:>32} {row['M']:6d} {row['N']:6d} {row['K']:6d} {row['config']:>18} "
              f"{ms['torch'] / ms['ours']:11.3f} {(ms['signal'] / ms['ours'] - 1) * 100:+6.2f} "
              f"{row['alt_config']:>18} {ms['alt'] / ms['ours']:8.3f} "
              + (f"{pred / ms['ours']:9.3f}" if pred else f"{'-':>9}")
              + (f"  twin {row['twin_config']} {ms['torch'] / ms['twin']:.3f}" if "twin" in ms else ""),
              flush=True)

    rows = gemm_llm.measure_rows(args.rounds, args.inner, args.seed, args.only, args.cluster, on_row=show,
                                 control=args.control)
    df = pd.DataFrame(rows)
    write_result(df, args.out, **gemm_llm.record_meta(args.rounds, args.inner))
    s = summary(df)
    print(f"cuBLAS / ours over {s['shapes']} shapes: geomean {s['geomean']:.3f}, median {s['median']:.3f}, worst "
          f"{s['worst']:.3f} (bar 1.00 / 1.00 / 0.97); signal vs plain median {s['signal_pct']:+.2f}%; "
          f"model's pick / ours geomean {s['vs_model']:.3f} (autotuning chose another on {s['tuned']}); "
          f"guess / ours geomean {s['vs_guess']:.3f} ({s['flips']} shapes off the guess); the other tile "
          f"faster by > 1 % on {s['alt_faster']}; stream-K tail on {s['stream_k']} (whole waves / stream-K "
          f"geomean {s['sk_gain']:.3f}) -> {args.out}")
    if s["twin"] is not None:
        r = s["twin"]
        print(f"cluster twin / ours: geomean {math.exp(np.log(r).mean()):.3f}, min {r.min():.3f}, max {r.max():.3f}")
    if s["control"] is not None:
        print(gemm_llm.control_line(df))


if __name__ == "__main__":
    main()
