"""Benchmark the sm_90a GEMM (fo_lib.gemm.sm90) against torch.matmul (cuBLAS) on one Hopper GPU.

Per (M, N, K), in the same interleaved rounds (fo_lib.testing.bench_interleaved, a random variant
order per round as in scripts/bench/bench_gemm.py): ``sm90`` (plain,
default config), ``sm90_signal`` (the full signal protocol as the engine runs it for AllReduce
tiles, one group per wave: through the row table, ``SM90.place_store`` being False),
``sm90_signal_tiles`` (the same with each tile at its place), ``sm90_signal_rows`` (C row-major),
``torch`` (``torch.matmul(a, b.T)``), optionally ``portable`` (fo_lib.gemm) and every
sm90 config as its own variant (``--configs``). Inputs rotate over enough sets that one round's
operands exceed the 60 MB L2 (fo_lib.experiments.kernel_bench, as in scripts/bench/bench_gemm.py).
Median TFLOP/s per variant goes to ``--out`` (CSV + provenance sidecar) and a short table is printed.

    python scripts/bench/bench_gemm_sm90.py --out data/h200/gemm_sm90.csv
    python scripts/bench/bench_gemm_sm90.py --quick --M 4096 --N 4096 --K 4096 --out /tmp/x.csv
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

from fo_lib.experiments.kernel_bench import add_config_variants, check_and_time, config_variant, input_sets  # noqa: E402
from fo_lib import gemm  # noqa: E402
from fo_lib.gemm import sm90 as gemm_sm90  # noqa: E402
from fo_lib.provenance import write_result  # noqa: E402
from fo_lib.testing import tile_tables  # noqa: E402


def bench_shape(M, N, K, dtype, rounds, inner, configs, portable=False, graph=False, swizzles=()):
    sets = input_sets(M, N, K, dtype)
    n_sets = len(sets)
    sms = gemm.sm_count()
    cfg = gemm_sm90.default_config(M, N, K, sms)
    ro, tg, cnt, place = tile_tables(M, N, cfg, sms)
    comm = [torch.empty(M * N, dtype=dtype, device="cuda") for _ in range(2)]

    def pick(i):
        return sets[i % n_sets]

    fns = {
        "torch": lambda i: torch.matmul(pick(i)[0], pick(i)[1].T, out=pick(i)[2]),
        "sm90": lambda i: gemm_sm90.gemm_nt(pick(i)[0], pick(i)[1], pick(i)[2], config=cfg),
        "sm90_signal": lambda i: gemm_sm90.gemm_nt_signal(pick(i)[0], pick(i)[1], comm[i % 2], ro, tg, cnt,
                                                          config=cfg),
        "sm90_signal_tiles": lambda i: gemm_sm90.gemm_nt_signal(pick(i)[0], pick(i)[1], comm[i % 2], None, tg, cnt,
                                                                config=cfg, tile_place=place),
        "sm90_signal_rows": lambda i: gemm_sm90.gemm_nt_signal(pick(i)[0], pick(i)[1], comm[i % 2], None, tg, cnt,
                                                               config=cfg),
    }
    if cfg.stream_k:  # signals run whole waves: their overhead is against the pick without its tail
        whole = cfg.whole_waves()
        fns["sm90_waves"] = lambda i: gemm_sm90.gemm_nt(pick(i)[0], pick(i)[1], pick(i)[2], config=whole)
    if portable:
        pcfg = gemm.default_config(M, N, K, sms)
        fns["portable"] = lambda i: gemm.gemm_nt(pick(i)[0], pick(i)[1], pick(i)[2], config=pcfg)
    add_config_variants(fns, gemm_sm90.SM90, gemm_sm90.CONFIGS, configs, sets, M)
    for sw in swizzles:  # the default tiles in bands of `sw` tile rows (1 = row-major raster)
        c = cfg.with_raster("row", sw)
        fns[f"swizzle:{sw}"] = (lambda c: lambda i: gemm_sm90.gemm_nt(pick(i)[0], pick(i)[1], pick(i)[2], config=c))(c)
    return check_and_time(fns, gemm_sm90.SM90, cfg, sets, M, N, K, rounds, inner, graph)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="CSV file to write (a .meta.json sidecar goes beside it)")
    p.add_argument("--quick", action="store_true", help="fewer rounds")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "f16"))
    p.add_argument("--M", type=int, nargs="*", default=[2048, 4096, 8192, 16384])
    p.add_argument("--N", type=int, nargs="*", default=[4096, 8192])
    p.add_argument("--K", type=int, nargs="*", default=[4096, 8192])
    p.add_argument("--configs", nargs="*", default=[],
                   help="also time these sm90 CONFIGS: NAME[/rowN|/colN][+sk] (default raster row, swizzle up to 8; "
                        "+sk: a stream-K tail; 'all' = every config)")
    p.add_argument("--portable", action="store_true", help="also time the portable fo_lib.gemm kernel")
    p.add_argument("--graph", action="store_true", help="time CUDA-graph replays (no host overhead)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 15, quick 6)")
    p.add_argument("--swizzles", type=int, nargs="*", default=[],
                   help="also time the default config in row bands of these many tile rows")
    args = p.parse_args(argv)
    if not gemm_sm90.is_supported():
        sys.exit("bench_gemm_sm90: needs a compute capability 9.0 GPU")
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    configs = list(gemm_sm90.CONFIGS) if args.configs == ["all"] else args.configs
    for c in configs:
        try:
            config_variant(gemm_sm90.CONFIGS, c, 1)
        except (KeyError, ValueError) as exc:
            p.error(f"--configs {c}: {exc} (NAME[/rowN|/colN][+sk], names: {' '.join(gemm_sm90.CONFIGS)})")
    rounds, inner = (6, 3) if args.quick else (15, 5)
    rounds = args.rounds or rounds
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False

    rows = []
    print(f"{'M':>6} {'N':>6} {'K':>6} {'config':>22} {'torch':>7} {'sm90':>7} {'x':>5} {'signal':>7} {'sig%':>6}"
          f"  rel_err" + (f" {'portable':>8}" if args.portable else "") + " "
          + " ".join(f"{c:>11}" for c in configs), flush=True)
    for M in args.M:
        for N in args.N:
            for K in args.K:
                cfg, err, res = bench_shape(M, N, K, dtype, rounds, inner, configs, args.portable, args.graph,
                                            args.swizzles)
                t, o, s = res["torch"][1], res["sm90"][1], res["sm90_signal"][1]
                overhead = (res["sm90_signal"][0] / res.get("sm90_waves", res["sm90"])[0] - 1) * 100
                extra = (f" {res['portable'][1]:8.1f}" if args.portable else "") + " " + \
                    " ".join(f"{res['cfg:' + c][1]:11.1f}" for c in configs)
                print(f"{M:6d} {N:6d} {K:6d} {cfg.tile_name + '/' + cfg.order + str(cfg.swizzle):>22} "
                      f"{t:7.1f} {o:7.1f} {o / t:5.2f} {s:7.1f} {overhead:+6.1f}  {err:.1e}{extra}", flush=True)
                for name, (ms, tf) in res.items():
                    rows.append(dict(M=M, N=N, K=K, dtype=args.dtype, variant=name,
                                     config=name[4:] if name.startswith("cfg:") else
                                     (cfg.tile_name if name.startswith(("sm90", "swizzle:")) else ""),
                                     order=cfg.order, swizzle=cfg.swizzle, median_ms=round(ms, 5),
                                     tflops=round(tf, 2), rounds=rounds, inner=inner, rel_err=float(f"{err:.3e}")))
                del res
                torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    write_result(df, args.out, link="none", dtype=args.dtype, rounds=rounds, inner=inner, graph=args.graph,
                 kernel="fo_lib.gemm.sm90")
    wide = df.pivot_table(index=["M", "N", "K"], columns="variant", values="median_ms", aggfunc="first")
    wide = wide.astype(float)
    ratio = wide["torch"] / wide["sm90"]
    plain = wide["sm90_waves"].fillna(wide["sm90"]) if "sm90_waves" in wide else wide["sm90"]
    sig = (wide["sm90_signal"] / plain - 1) * 100
    print(f"sm90 / torch.matmul ({args.dtype}): geomean {math.exp(np.log(ratio).mean()):.3f} over "
          f"{len(ratio)} shapes; median {ratio.median():.3f}, min {ratio.min():.3f}")
    rows_sig = (wide["sm90_signal_rows"] / plain - 1) * 100
    tiles_sig = (wide["sm90_signal_tiles"] / plain - 1) * 100
    print(f"sm90 signal vs plain: median {sig.median():+.2f}% (min {sig.min():+.2f}, max {sig.max():+.2f}); "
          f"through tile places {tiles_sig.median():+.2f}%; signal_rows (no table) vs plain: median "
          f"{rows_sig.median():+.2f}%  -> {args.out}")


if __name__ == "__main__":
    main()
