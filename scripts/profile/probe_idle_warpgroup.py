"""What a cooperative tile costs when its second warpgroup has no rows, and what the stream-K runs
weighed by that cost gain (issue 23, M = 5000: the last row of 128-row tiles holds 8 rows).

1. The cost: a last partial wave of such tiles against one of whole ones, each after the same two
   whole waves (B in L2; one wave of 8-row tiles across N = SMs x BN streamed a 553 MB B from DRAM
   and read bandwidth, not MMAs), in the same interleaved rounds: the ratio of what the third wave
   adds is the cost to weigh them by (``fo_lib.gemm.sm90.IDLE_WARPGROUP_TILE_COST``).
2. The schedule: the shape's stream-K config planned with each ``--costs`` entry (1.0: the plan
   without weights, the split tail), in whole waves, and cuBLAS, all in the same rounds.

Prints a line per variant (median us, over cuBLAS) and writes them to ``--out`` (CSV + provenance).

    python scripts/profile/probe_idle_warpgroup.py --out /tmp/idle_wg.csv
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def runs_with_cost(sm90, cfg, cost, a, b, ctas, label):
    """``{label: TuningRun}`` of ``cfg`` planned as if idle-warpgroup tiles cost ``cost``, and its plan."""
    with sm90.idle_warpgroup_tile_cost(cost):
        (run,) = sm90.tuning_runs([cfg], "bf16", a, b, ctas).values()
        sk, split, bounds = sm90.stream_k_schedule(cfg, a.shape[0], b.shape[0], a.shape[1], ctas)
    return {label: run}, f"sk {sk} split {split}" + (" unequal runs" if bounds is not None else "")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--M", type=int, default=5000)
    p.add_argument("--N", type=int, default=7168)
    p.add_argument("--K", type=int, default=8192)
    p.add_argument("--config", default="128x256x64/row8+sk", help="a stream-K config label")
    p.add_argument("--costs", type=float, nargs="+", default=[1.0, 0.6, 0.8, 0.9])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    import pandas as pd
    import torch

    from fo_lib.experiments.kernel_bench import config_variant, input_sets
    from fo_lib.gemm import autotune, sm90
    from fo_lib.provenance import write_result
    from fo_lib.testing import bench_interleaved, summarize

    if not sm90.is_supported():
        sys.exit("probe_idle_warpgroup: needs a compute capability 9.0 GPU")
    ctas = sm90.sm_count()
    cfg = config_variant(sm90.CONFIGS, args.config, args.M)
    if not cfg.stream_k or cfg.pingpong:
        p.error("--config: a cooperative config with a stream-K tail (NAME/RASTER+sk)")
    rows = []

    def timed(runs, what):
        ms = summarize(bench_interleaved(runs, rounds=args.rounds, inner=autotune.REPS, warmup=1, graph=True,
                                         order="shuffle", seed=0, capture_error_mode="thread_local"))
        for label, v in ms.items():
            rows.append(dict(what=what, variant=label, us=round(v * 1e3, 2)))
        return ms

    # 1. A last partial wave of tiles with 8 rows against one of whole tiles: 22 tile columns and
    # 6 x (SMs / 132) x 2 tile rows fill exactly two waves in a row-major raster (B, 22 x BN x 4096,
    # stays in L2), and one tile row more is a third, partial wave of its own.
    whole = replace(cfg.whole_waves(), order="row", swizzle=1)
    n_cols, base = 22, ctas // 22 * 2 * whole.BM
    runs = {}
    for extra in (0, 8, whole.BM):
        a, b = input_sets(base + extra, n_cols * whole.BN, 4096, torch.bfloat16)[0][:2]
        runs[f"+{extra}"] = next(iter(sm90.tuning_runs([whole], "bf16", a, b, ctas).values()))
    ms = timed(runs, "last wave")
    short, full = ms["+8"] - ms["+0"], ms[f"+{whole.BM}"] - ms["+0"]
    print(f"a last wave of {n_cols} tiles {whole.BM} x {whole.BN} x 4096 after two whole waves: 8 rows "
          f"{short * 1e3:.1f} us, {whole.BM} rows {full * 1e3:.1f} us: cost {short / full:.3f}", flush=True)
    # 2. The shape's stream-K schedules.
    sets = input_sets(args.M, args.N, args.K, torch.bfloat16)
    a, b = sets[0][0], sets[0][1]
    runs, plans = {}, {}
    for cost in args.costs:
        r, plans[f"cost {cost:g}"] = runs_with_cost(sm90, cfg, cost, a, b, ctas, f"cost {cost:g}")
        runs.update(r)
    runs["whole waves"] = next(iter(sm90.tuning_runs([replace(cfg, stream_k=False)], "bf16", a, b, ctas).values()))
    first = next(iter(runs.values()))
    runs["cublas"] = lambda i: torch.matmul(first.sets[i % len(first.sets)][0], first.sets[i % len(first.sets)][1].T,
                                            out=first.outs[i % len(first.outs)])
    ms = timed(runs, f"{args.M} x {args.N} x {args.K} {args.config}")
    for label, v in ms.items():
        print(f"{label:12s} {v * 1e3:8.1f} us  cuBLAS / it {ms['cublas'] / v:.3f}  {plans.get(label, '')}", flush=True)
    if args.out:
        write_result(pd.DataFrame(rows), args.out, command=" ".join(["probe_idle_warpgroup.py", *(argv or sys.argv[1:])]),
                     rounds=args.rounds, inner=autotune.REPS, graph=True, dtype="bf16")


if __name__ == "__main__":
    main()
