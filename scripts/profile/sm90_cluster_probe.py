"""Clusters of 2 on this GPU: how many fit at once (the driver's occupancy query) and what a cluster
config's grid size costs (ctas 132 / 130 / 128 / 120 against the same tiles without clusters),
interleaved CUDA-graph medians on one shape. An experiment for issue 23; prints a table.

    python scripts/profile/sm90_cluster_probe.py --shape 8192 8192 8192
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def config_named(name: str):
    """A CONFIGS name, or ``128x<BN>x64s<stages>[c2]`` for a stage count outside CONFIGS."""
    import re

    from fo_lib.gemm import sm90
    if name in sm90.CONFIGS:
        return sm90.CONFIGS[name]
    m = re.fullmatch(r"128x(\d+)x64s(\d+)(c2)?", name)
    if not m:
        raise SystemExit(f"unknown config {name!r}")
    return sm90.Sm90Config(int(m.group(1)), int(m.group(2)), cluster=2 if m.group(3) else 1).validate()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", type=int, nargs=3, default=(8192, 8192, 8192))
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--ctas", type=int, nargs="+", default=(132, 130, 128, 120))
    p.add_argument("--configs", nargs="+", default=("128x256x64", "128x256x64c2"))
    args = p.parse_args(argv)
    import torch

    from fo_lib.experiments.kernel_bench import input_sets
    from fo_lib.gemm import sm90
    from fo_lib.testing import bench_interleaved, summarize

    for name in args.configs:
        cfg = config_named(name)
        print(f"{name}: {sm90.cluster_capacity(cfg)} clusters of {cfg.cluster} resident at once", flush=True)
    M, N, K = args.shape
    sets = input_sets(M, N, K, torch.bfloat16)
    fns = {"torch": lambda i: torch.matmul(sets[i % len(sets)][0], sets[i % len(sets)][1].T, out=sets[i % len(sets)][2])}
    for name in args.configs:
        cfg = config_named(name).with_raster("row", 8)
        for ctas in args.ctas:
            fns[f"{name}@{ctas}"] = (lambda c, n: lambda i: sm90.gemm_nt(*sets[i % len(sets)], config=c, ctas=n))(cfg, ctas)
    med = summarize(bench_interleaved(fns, rounds=args.rounds, inner=3, warmup=2, graph=True, order="shuffle"))
    flop = 2.0 * M * N * K
    for k, v in med.items():
        print(f"{k:>22} {v:8.4f} ms {flop / v / 1e9:7.1f} TFLOP/s  torch/this {med['torch'] / v:.3f}")


if __name__ == "__main__":
    main()
