"""Benchmark fo_lib.gemm against torch.matmul (cuBLAS) on one GPU.

Per (M, N, K), in interleaved rounds (fo_lib.testing.bench_interleaved): our plain kernel with the
default config; the full signal protocol as the engine runs it for AllReduce tiles ("signal": one
group per wave, each tile stored at its place, fo_lib.reorder.TileReorder.tile_place, since
``PORTABLE.place_store``); the same with the waves in at most 4 groups ("signal_4g"); the same through the row table ("signal_table", the All-to-All's store)
and without signalling ("scatter");
the signal with C stored row-major ("signal_rows", the AllReduce rows layout); and
``torch.matmul(a, b.T)``; optionally every big config as its own variant (``--configs``). Inputs are
random and rotate over enough sets that one round's operands exceed the 60 MB L2. The variants run in
a fresh random order each round (``--order``); ``--control`` adds the plain kernel a second time, whose
difference from the first is the measurement's own noise. Median TFLOP/s per
variant goes to ``--out`` (CSV) and a short table is printed. The measuring core is
fo_lib.experiments.kernel_bench, which notebook 06 runs in measure mode.

    python scripts/bench/bench_gemm.py --out bench.csv            # full grid
    python scripts/bench/bench_gemm.py --quick --out bench.csv    # fewer rounds
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from fo_lib import gemm  # noqa: E402
from fo_lib.experiments import kernel_bench as kb  # noqa: E402  (the measuring core, shared with notebook 06)
from fo_lib.provenance import write_result  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="CSV file to write")
    p.add_argument("--quick", action="store_true", help="fewer rounds")
    p.add_argument("--dtype", default="bf16", choices=kb.DTYPES)
    p.add_argument("--M", type=int, nargs="*", default=list(kb.GEMM_SHAPES["M"]))
    p.add_argument("--N", type=int, nargs="*", default=list(kb.GEMM_SHAPES["N"]))
    p.add_argument("--K", type=int, nargs="*", default=list(kb.GEMM_SHAPES["K"]))
    p.add_argument("--configs", nargs="*", default=[],
                   help="also time these CONFIGS by name ('all' = every config)")
    p.add_argument("--ablation", action="store_true",
                   help="also time the table store with a row-major table (layout vs table cost)")
    p.add_argument("--graph", action="store_true", help="time CUDA-graph replays (no host overhead)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 15, quick 6)")
    p.add_argument("--control", action="store_true",
                   help="also time the plain kernel a second time ('ours_again': the noise floor)")
    p.add_argument("--order", default=kb.ORDER, choices=("alternate", "shuffle"),
                   help="variant order in a round: a random one per round (seeded by the shape; the "
                        "default), or the given one reversed every other round")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the shuffled orders (with the shape); give repeats different seeds")
    p.add_argument("--samples", help="also write every round's time per variant, with its place in the "
                                     "round, to this CSV (how the order affects a variant)")
    args = p.parse_args(argv)
    configs = list(gemm.CONFIGS) if args.configs == ["all"] else args.configs
    rounds, inner = kb.gemm_rounds(args.quick, args.rounds)
    df, samples = kb.run_gemm(kb.shape_grid(args.M, args.N, args.K), dtype=args.dtype, rounds=rounds, inner=inner,
                              configs=configs, ablation=args.ablation, graph=args.graph, control=args.control,
                              order=args.order, seed=args.seed, samples=bool(args.samples),
                              log=lambda line: print(line, flush=True))
    write_result(df, args.out, link="none", dtype=args.dtype, rounds=rounds, inner=inner, graph=args.graph,
                 order=args.order, seed=args.seed)
    if args.samples:
        write_result(samples, args.samples, link="none", dtype=args.dtype, rounds=rounds,
                     inner=inner, graph=args.graph, order=args.order, seed=args.seed)
    wide = df.pivot_table(index=["M", "N", "K"], columns="variant", values="median_ms", aggfunc="first")
    wide = wide.astype(float)
    ratio = wide["torch"] / wide["ours"]
    big = ratio[[m >= 2048 and n >= 2048 and k >= 2048 for m, n, k in ratio.index]]
    sig = (wide["signal"] / wide["ours"] - 1) * 100
    scat = (wide["scatter"] / wide["ours"] - 1) * 100
    print(f"ours / torch.matmul ({args.dtype}): geomean {math.exp(np.log(ratio).mean()):.3f} over "
          f"{len(ratio)} shapes; M,N,K >= 2048: median {big.median():.3f}, min {big.min():.3f}")
    rows_sig = (wide["signal_rows"] / wide["ours"] - 1) * 100
    sig4 = (wide["signal_4g"] / wide["ours"] - 1) * 100
    print(f"signal (tile places, at most 4 groups) vs plain: median {sig4.median():+.2f}% "
          f"(min {sig4.min():+.2f}, max {sig4.max():+.2f})")
    table_sig = (wide["signal_table"] / wide["ours"] - 1) * 100
    print(f"signal (tile places) vs plain: median {sig.median():+.2f}% (min {sig.min():+.2f}, max {sig.max():+.2f}); "
          f"signal through the row table: median {table_sig.median():+.2f}%; scatter vs plain: median "
          f"{scat.median():+.2f}%; signal_rows (no table) vs plain: median "
          f"{rows_sig.median():+.2f}% (min {rows_sig.min():+.2f}, max {rows_sig.max():+.2f})  -> {args.out}")
    by_k = sig.groupby(level="K").median()
    print("signal (tile places) vs plain by K: " + ", ".join(f"K={k} {v:+.2f}%" for k, v in by_k.items()))
    for name in ("ours_again", "signal_no_group", "signal_rows_no_group", "plain_into_comm"):
        if name in wide:
            x = (wide[name] / wide["ours"] - 1) * 100
            print(f"{name} vs plain: median {x.median():+.2f}% (min {x.min():+.2f}, max {x.max():+.2f})")
    if "scatter_rowmajor" in wide:
        rm = (wide["scatter_rowmajor"] / wide["ours"] - 1) * 100
        print(f"scatter through a row-major table vs plain: median {rm.median():+.2f}% "
              f"(min {rm.min():+.2f}, max {rm.max():+.2f})")


if __name__ == "__main__":
    main()
