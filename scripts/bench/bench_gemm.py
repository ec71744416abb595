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
variant goes to ``--out`` (CSV) and a short table is printed.

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
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from fo_lib import gemm  # noqa: E402
from fo_lib.provenance import write_result  # noqa: E402
from fo_lib.testing import bench_interleaved, summarize, tile_tables  # noqa: E402

L2_BYTES = 60 * 2**20
# Variants in a random order per round (fo_lib.testing.round_orders). NOTES: in the alternating order
# each variant keeps its place and its neighbours, and on this power-capped GPU the plain kernel timed
# twice then differed by 2-4 % on long (>= 1 ms) shapes; in a random order by ~1 % at most
# (docs/perf-log.md, session 10).
ORDER = "shuffle"


def input_sets(M, N, K, dtype):
    """Enough (a, b, out) sets that rotating through them keeps every call's operands out of L2."""
    elem = torch.finfo(dtype).bits // 8
    set_bytes = (M * K + N * K + M * N) * elem
    n_sets = max(2, min(16, math.ceil(3 * L2_BYTES / set_bytes)))
    return [(torch.randn(M, K, device="cuda").to(dtype), torch.randn(N, K, device="cuda").to(dtype),
             torch.empty(M, N, dtype=dtype, device="cuda")) for _ in range(n_sets)]


def add_config_variants(fns, family, configs_by_name, names, sets, M):
    """Variants ``cfg:<name>``: each named config (row raster, swizzle up to 8) on the same inputs."""
    for name in names:
        base = configs_by_name[name]
        c = base.with_raster("row", min(8, -(-M // base.BM)))
        fns[f"cfg:{name}"] = (lambda c: lambda i: family.gemm_nt(*sets[i % len(sets)], config=c))(c)


def check_and_time(fns, family, cfg, sets, M, N, K, rounds, inner, graph, order=ORDER, record=None,
                   seed=0):
    """A correctness smoke check against cuBLAS (the tests compare with float64), then interleaved
    medians: returns ``(cfg, rel. error, {variant: (ms, TFLOP/s)})``. ``record``: a list that receives
    every round's measurements (``bench_interleaved``)."""
    a, b, _ = sets[0]
    want = torch.matmul(a, b.T).float()
    err = ((family.gemm_nt(a, b, config=cfg).float() - want).norm() / want.norm()).item()
    med = summarize(bench_interleaved(fns, rounds=rounds, inner=inner, warmup=2, graph=graph, order=order,
                                      seed=(seed, M, N, K), record=record))
    flop = 2.0 * M * N * K
    return cfg, err, {k: (v, flop / (v * 1e-3) / 1e12) for k, v in med.items()}


def bench_shape(M, N, K, dtype, rounds, inner, configs, ablation=False, graph=False, control=False,
                order=ORDER, record=None, seed=0):
    sets = input_sets(M, N, K, dtype)
    n_sets = len(sets)
    sms = gemm.sm_count()
    cfg = gemm.default_config(M, N, K, sms)
    ro, tg, cnt, place = tile_tables(M, N, cfg, sms)
    _, tg4, cnt4, place4 = tile_tables(M, N, cfg, sms, groups=4)
    comm = [torch.empty(M * N, dtype=dtype, device="cuda") for _ in range(2)]

    fns = {
        "torch": lambda i: torch.matmul(sets[i % n_sets][0], sets[i % n_sets][1].T,
                                        out=sets[i % n_sets][2]),
        "ours": lambda i: gemm.gemm_nt(sets[i % n_sets][0], sets[i % n_sets][1], sets[i % n_sets][2],
                                       config=cfg),
        "scatter": lambda i: gemm.gemm_nt_scatter(sets[i % n_sets][0], sets[i % n_sets][1], comm[i % 2],
                                                  ro, config=cfg),
        "signal": lambda i: gemm.gemm_nt_signal(sets[i % n_sets][0], sets[i % n_sets][1], comm[i % 2],
                                                None, tg, cnt, config=cfg, tile_place=place),
        # The same with at most 4 groups (a CTA releases once per group it leaves, not per tile).
        "signal_4g": lambda i: gemm.gemm_nt_signal(sets[i % n_sets][0], sets[i % n_sets][1], comm[i % 2],
                                                   None, tg4, cnt4, config=cfg, tile_place=place4),
        "signal_table": lambda i: gemm.gemm_nt_signal(sets[i % n_sets][0], sets[i % n_sets][1], comm[i % 2],
                                                      ro, tg, cnt, config=cfg),
        # The same signal with C stored row-major (the AllReduce rows layout): no table read.
        "signal_rows": lambda i: gemm.gemm_nt_signal(sets[i % n_sets][0], sets[i % n_sets][1], comm[i % 2],
                                                     None, tg, cnt, config=cfg),
    }
    if ablation:
        # Same table-store path, but the table is plain row-major C: isolates the cost of the
        # tile-contiguous destination layout from the cost of reading the table.
        ro_rm = torch.from_numpy(np.arange(M, dtype=np.int64)[:, None] * N
                                 + np.arange(ro.shape[1], dtype=np.int64)[None, :] * cfg.BN).cuda()
        fns["scatter_rowmajor"] = lambda i: gemm.gemm_nt_scatter(sets[i % n_sets][0], sets[i % n_sets][1],
                                                                 comm[i % 2], ro_rm, config=cfg)
        # The destination buffer alone: the row-major table store into the rotating output sets,
        # and the plain store into the two communication buffers.
        fns["scatter_rowmajor_into_c"] = lambda i: gemm.gemm_nt_scatter(
            sets[i % n_sets][0], sets[i % n_sets][1], sets[i % n_sets][2].view(-1), ro_rm, config=cfg)
        fns["plain_into_comm"] = lambda i: gemm.gemm_nt(sets[i % n_sets][0], sets[i % n_sets][1],
                                                        comm[i % 2].view(M, N), config=cfg)
        # The signal kernels run with no group due (every tile's group -1): the same binaries, the
        # release skipped at run time. Separates the release's cost from the code's.
        tg_none = torch.full_like(tg, -1)
        fns["signal_no_group"] = lambda i: gemm.gemm_nt_signal(sets[i % n_sets][0], sets[i % n_sets][1],
                                                               comm[i % 2], None, tg_none, cnt, config=cfg,
                                                               tile_place=place)
        fns["signal_rows_no_group"] = lambda i: gemm.gemm_nt_signal(sets[i % n_sets][0], sets[i % n_sets][1],
                                                                    comm[i % 2], None, tg_none, cnt, config=cfg)
    if control:
        # The plain kernel once more, as its own variant: its difference from "ours" is what the
        # measurement itself gives two identical kernels (the noise floor of every "vs plain").
        fns["ours_again"] = lambda i: gemm.gemm_nt(sets[i % n_sets][0], sets[i % n_sets][1], sets[i % n_sets][2],
                                                   config=cfg)
    add_config_variants(fns, gemm.PORTABLE, gemm.CONFIGS, configs, sets, M)
    return check_and_time(fns, gemm.PORTABLE, cfg, sets, M, N, K, rounds, inner, graph, order, record, seed)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="CSV file to write")
    p.add_argument("--quick", action="store_true", help="fewer rounds")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "f16"))
    p.add_argument("--M", type=int, nargs="*", default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--N", type=int, nargs="*", default=[4096, 8192])
    p.add_argument("--K", type=int, nargs="*", default=[1024, 4096, 8192])
    p.add_argument("--configs", nargs="*", default=[],
                   help="also time these CONFIGS by name ('all' = every config)")
    p.add_argument("--ablation", action="store_true",
                   help="also time the table store with a row-major table (layout vs table cost)")
    p.add_argument("--graph", action="store_true", help="time CUDA-graph replays (no host overhead)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 15, quick 6)")
    p.add_argument("--control", action="store_true",
                   help="also time the plain kernel a second time ('ours_again': the noise floor)")
    p.add_argument("--order", default=ORDER, choices=("alternate", "shuffle"),
                   help="variant order in a round: a random one per round (seeded by the shape; the "
                        "default), or the given one reversed every other round")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the shuffled orders (with the shape); give repeats different seeds")
    p.add_argument("--samples", help="also write every round's time per variant, with its place in the "
                                     "round, to this CSV (how the order affects a variant)")
    args = p.parse_args(argv)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    configs = list(gemm.CONFIGS) if args.configs == ["all"] else args.configs
    rounds, inner = (6, 3) if args.quick else (15, 5)
    rounds = args.rounds or rounds
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False

    rows, samples = [], []
    print(f"{'M':>6} {'N':>6} {'K':>6} {'config':>24} {'torch':>7} {'ours':>7} {'x':>5} {'signal':>7} "
          f"{'scat%':>6} {'sig%':>6}  vs_torch " + " ".join(f"{c:>11}" for c in configs), flush=True)
    for M in args.M:
        for N in args.N:
            for K in args.K:
                record = [] if args.samples else None
                cfg, err, res = bench_shape(M, N, K, dtype, rounds, inner, configs, args.ablation, args.graph,
                                            args.control, args.order, record, args.seed)
                samples += [dict(M=M, N=N, K=K, round=r, place=q, variant=v, ms=round(ms, 5))
                            for r, q, v, ms in record or ()]
                t, o, s = res["torch"][1], res["ours"][1], res["signal"][1]
                overhead = (res["signal"][0] / res["ours"][0] - 1) * 100
                scat = (res["scatter"][0] / res["ours"][0] - 1) * 100
                extra = " ".join(f"{res['cfg:' + c][1]:11.1f}" for c in configs)
                print(f"{M:6d} {N:6d} {K:6d} {cfg.tile_name + '/' + cfg.order + str(cfg.swizzle):>24} "
                      f"{t:7.1f} {o:7.1f} {o / t:5.2f} {s:7.1f} {scat:+6.1f} {overhead:+6.1f}  {err:.1e} {extra}",
                      flush=True)
                for name, (ms, tf) in res.items():
                    rows.append(dict(M=M, N=N, K=K, dtype=args.dtype, variant=name,
                                     config=cfg.tile_name if not name.startswith("cfg:") else name[4:],
                                     order=cfg.order, swizzle=cfg.swizzle, median_ms=round(ms, 5),
                                     tflops=round(tf, 2), rounds=rounds, inner=inner, rel_err=float(f"{err:.3e}")))
                del res
                torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    write_result(df, args.out, link="none", dtype=args.dtype, rounds=rounds, inner=inner, graph=args.graph,
                 order=args.order, seed=args.seed)
    if args.samples:
        write_result(pd.DataFrame(samples), args.samples, link="none", dtype=args.dtype, rounds=rounds,
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
