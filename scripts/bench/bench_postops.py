"""Benchmark the post-communication reorder kernel (fo_lib.postops) on one GPU.

Per (R, N), in interleaved rounds (fo_lib.testing.bench_interleaved), medians:

* ``ours_rms``: post-reorder + RMSNorm through a random tile-permutation table (BM = BN = 128 tiles
  stored row-major in a random slot order, as after a tile-unit AllReduce) vs ``torch_rms``:
  ``torch.nn.functional.rms_norm`` on the same values already in row-major order. Target: ratio
  ``ours_rms / torch_rms <= 1.05``.
* ``ours_gather``: the plain gather through the same table vs ``copy``: ``out.copy_(x)``.

Inputs rotate over enough sets that one round's operands exceed the L2 several times. By default each
variant is timed as a CUDA graph holding ``K`` back-to-back calls (host launch overhead excluded; the
per-call time is the graph time / K); ``--no-graph`` times eager launches instead (validated launchers,
so the per-call Python cost is only the CuPy launch). Results go to ``--out`` (CSV) and a short table.

    python scripts/bench/bench_postops.py --out postops.csv
    python scripts/bench/bench_postops.py --quick --out postops.csv --tpr 256 512 1024   # also other block widths
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from fo_lib import postops  # noqa: E402
from fo_lib.postops import PostOps  # noqa: E402

from fo_lib.provenance import write_result  # noqa: E402
from fo_lib.testing import bench_interleaved, random_tile_layout, summarize  # noqa: E402

L2_BYTES = 60 * 2**20
BM = 128


def tile_permutation_table(R: int, N: int, BN: int, rng) -> np.ndarray:
    """BM x BN tiles of [R, N], each row-major, laid out back to back in a random order."""
    return random_tile_layout(R, N, BM, BN, rng)[0]


def scatter(x: torch.Tensor, table: torch.Tensor, BN: int) -> torch.Tensor:
    """The communication buffer holding x in the table's layout (column block by column block)."""
    R, N = x.shape
    buf = torch.empty(R * N, dtype=x.dtype, device=x.device)
    for t in range(table.shape[1]):
        cols = min(BN, N - t * BN)
        idx = table[:, t:t + 1] + torch.arange(cols, device=x.device)[None, :]
        buf[idx.reshape(-1)] = x[:, t * BN:t * BN + cols].reshape(-1)
    return buf


def bench_shape(R, N, BN, dtype, rounds, rng, use_graph, tprs, eps=1e-6):
    tensor_bytes = R * N * torch.finfo(dtype).bits // 8
    n_sets = max(2, min(8, math.ceil(3 * L2_BYTES / (2 * tensor_bytes))))
    table = torch.from_numpy(tile_permutation_table(R, N, BN, rng)).cuda()
    w = (0.5 + torch.rand(N, device="cuda")).to(dtype)
    xs, bufs, outs, touts = [], [], [], []
    for _ in range(n_sets):
        x = torch.randn(R, N, device="cuda").to(dtype)
        xs.append(x)
        bufs.append(scatter(x, table, BN))
        outs.append(torch.empty(R, N, dtype=dtype, device="cuda"))
        touts.append(torch.empty(R, N, dtype=dtype, device="cuda"))
    norm = PostOps(rmsnorm=True, eps=eps)

    # Correctness smoke check before timing.
    got = postops.post_reorder(bufs[0], table, (R, N), BN, norm, weight=w, check_table=True)
    want = torch.nn.functional.rms_norm(xs[0], (N,), w, eps=eps)
    err = (got.double() - want.double()).abs().max().item()
    same = torch.equal(postops.post_reorder(bufs[0], table, (R, N), BN), xs[0])
    if not same:
        raise SystemExit(f"plain gather differs from the row-major input at R={R}, N={N}")

    launchers = {
        "ours_rms": [postops.post_reorder_launcher(bufs[i], table, (R, N), BN, norm, weight=w, out=outs[i])
                     for i in range(n_sets)],
        "ours_gather": [postops.post_reorder_launcher(bufs[i], table, (R, N), BN, out=outs[i])
                        for i in range(n_sets)],
    }
    for g in tprs:
        try:
            launchers[f"ours_rms_g{g}"] = [postops.post_reorder_launcher(
                bufs[i], table, (R, N), BN, norm, weight=w, out=outs[i], threads_per_row=g) for i in range(n_sets)]
        except ValueError:
            pass  # the row does not fit with this width
    calls = {
        "torch_rms": lambda i: torch.nn.functional.rms_norm(xs[i % n_sets], (N,), w, eps=eps),
        "copy": lambda i: touts[i % n_sets].copy_(xs[i % n_sets]),
    }
    for name, ls in launchers.items():
        calls[name] = (lambda ls: lambda i: ls[i % n_sets]())(ls)
    order = ["torch_rms", "ours_rms", "copy", "ours_gather"] + [n for n in calls if n.startswith("ours_rms_g")]
    calls = {n: calls[n] for n in order}

    per_graph = n_sets * max(1, math.ceil(8 / n_sets))
    if use_graph:
        try:
            graphs = {}
            torch.cuda.synchronize()
            for name, fn in calls.items():
                for i in range(n_sets):  # warm up outside capture (allocator, module loads)
                    fn(i)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for i in range(per_graph):
                        fn(i)
                graphs[name] = g
            torch.cuda.synchronize()
            fns = {name: (lambda g: lambda i: g.replay())(g) for name, g in graphs.items()}
            samples = bench_interleaved(fns, rounds=rounds, inner=1, warmup=2)
            med = {k: v / per_graph for k, v in summarize(samples).items()}
            del graphs
        except RuntimeError as exc:  # capture not possible here: time eagerly
            print(f"  (graph capture failed: {exc}; timing eager launches)", flush=True)
            use_graph = False
    if not use_graph:
        samples = bench_interleaved(calls, rounds=rounds, inner=per_graph, warmup=2)
        med = summarize(samples)
    tpr = {name: ls[0].config.threads_per_row for name, ls in launchers.items()}
    cfg = launchers["ours_rms"][0].config
    return med, err, use_graph, cfg, n_sets, tpr


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="CSV file to write")
    p.add_argument("--quick", action="store_true", help="fewer rounds")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "f16"))
    p.add_argument("--R", type=int, nargs="*", default=[1024, 4096, 16384])
    p.add_argument("--N", type=int, nargs="*", default=[1024, 4096, 8192, 16384])
    p.add_argument("--BN", type=int, default=128)
    p.add_argument("--no-graph", action="store_true", help="time eager launches instead of CUDA graphs")
    p.add_argument("--tpr", type=int, nargs="*", default=[], help="also time ours_rms with these threads_per_row")
    args = p.parse_args(argv)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    rounds = 7 if args.quick else 25
    rng = np.random.default_rng(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, dtype {args.dtype}, BN {args.BN}", flush=True)
    print(f"{'R':>6} {'N':>6} {'block':>9} {'torch_rms':>10} {'ours_rms':>10} {'ratio':>6} {'GB/s':>7} | "
          f"{'copy':>9} {'gather':>9} {'ratio':>6} {'GB/s':>7}  max|err|", flush=True)
    rows = []
    for R in args.R:
        for N in args.N:
            med, err, graph, cfg, n_sets, tpr = bench_shape(R, N, args.BN, dtype, rounds, rng, not args.no_graph,
                                                       args.tpr)
            moved = 2 * R * N * torch.finfo(dtype).bits // 8  # read + write, bytes
            gbs = {k: moved / (v * 1e-3) / 1e9 for k, v in med.items()}
            r_rms = med["ours_rms"] / med["torch_rms"]
            r_copy = med["ours_gather"] / med["copy"]
            extra = " ".join(f"{k[9:]}:{med[k] / med['torch_rms']:.3f}" for k in med if k.startswith("ours_rms_g"))
            print(f"{R:6d} {N:6d} {cfg.threads_per_row:>5}x{cfg.rows_per_cta:<3} {med['torch_rms'] * 1e3:9.1f}u "
                  f"{med['ours_rms'] * 1e3:9.1f}u {r_rms:6.3f} {gbs['ours_rms']:7.0f} | {med['copy'] * 1e3:8.1f}u "
                  f"{med['ours_gather'] * 1e3:8.1f}u {r_copy:6.3f} {gbs['ours_gather']:7.0f}  {err:.2e} {extra}",
                  flush=True)
            base = {"torch_rms": "torch_rms", "copy": "copy", "ours_gather": "copy"}
            for name, ms in med.items():
                ref = base.get(name, "torch_rms")
                rows.append(dict(R=R, N=N, BN=args.BN, dtype=args.dtype, variant=name, median_ms=f"{ms:.6f}",
                                 GBps=f"{gbs[name]:.1f}", ratio=f"{ms / med[ref]:.4f}", baseline=ref,
                                 threads_per_row=tpr.get(name, ""),
                                 rounds=rounds, graph=int(graph), sets=n_sets, max_abs_err_vs_torch=f"{err:.3e}"))
            torch.cuda.empty_cache()
    import pandas as pd
    write_result(pd.DataFrame(rows), args.out, link="none", dtype=args.dtype)
    rms = [float(r["ratio"]) for r in rows if r["variant"] == "ours_rms"]
    worst = max((r for r in rows if r["variant"] == "ours_rms"), key=lambda r: float(r["ratio"]))
    print(f"post-reorder RMSNorm / torch rms_norm: median {np.median(rms):.3f} over {len(rms)} shapes")
    print(f"worst ours_rms / torch_rms = {worst['ratio']} at R={worst['R']} N={worst['N']} (target <= 1.05); "
          f"wrote {args.out}")


if __name__ == "__main__":
    main()
