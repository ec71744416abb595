"""Where the sm_90a GEMM loses to cuBLAS on a shape (issue 23): per unit of work or at its ends.

Per ``M,N,K,CONFIG`` (a config label as the LLM benchmark writes it, e.g. ``128x176x64pd/row8``):

1. ours (the config in whole waves, as the probe runs it; with ``+sk`` the stream-K launch too) and
   ``torch.matmul`` timed in interleaved rounds of CUDA-graph replays on inputs that rotate beyond L2;
2. the probe epilogue's per-tile stamps over ``--probes`` launches, cut by
   :func:`fo_lib.experiments.cta_timeline.summarize` into skew, the steady cadence per unit, and what
   the ends cost (median over launches).

One CSV row per shape (+ sidecar). (The clocks the kernels ran at are not read here: under the power
cap an ``nvidia-smi`` reading beside a short hold follows the limiter's lag, not the kernel;
``probe_late_tuning.py`` reads them around whole timings.)

    python scripts/profile/probe_sm90_timeline.py --shapes 2048,7168,5120,128x176x64pd/row8 --out /tmp/t.csv
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# Four of the slowest LLM shapes against cuBLAS with their usual picks, and two where ours leads.
DEFAULT_SHAPES = ("5000,7168,8192,128x256x64/row8+sk", "2048,7168,5120,128x176x64pd/row8",
                  "1536,28672,4096,128x176x64pd/col4", "2048,4096,7168,128x256x64/row8",
                  "12288,7168,4096,128x176x64c2p/row8", "8192,18944,3584,128x256x64/row8")


def parse_shape(text: str) -> tuple[int, int, int, str]:
    """``M,N,K,CONFIG`` -> ``(M, N, K, CONFIG)``; ValueError naming the text otherwise."""
    parts = text.split(",")
    if len(parts) != 4 or not all(p.strip().isdigit() and int(p) > 0 for p in parts[:3]):
        raise ValueError(f"--shapes: M,N,K,CONFIG with positive integers, got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2]), parts[3].strip()


def probe_shape(M, N, K, label, rounds, probes) -> dict:
    import numpy as np
    import torch

    from fo_lib.experiments.cta_timeline import summarize
    from fo_lib.experiments.kernel_bench import config_variant, input_sets
    from fo_lib.gemm import sm90
    from fo_lib.testing import bench_interleaved, summarize as medians

    sets = input_sets(M, N, K, torch.bfloat16)
    n = len(sets)
    cfg = config_variant(sm90.CONFIGS, label, M)
    whole = cfg.whole_waves()
    fns = {"ours": lambda i: sm90.gemm_nt(*sets[i % n], config=whole),
           "cublas": lambda i: torch.matmul(sets[i % n][0], sets[i % n][1].T, out=sets[i % n][2])}
    if cfg.stream_k:
        fns["ours_sk"] = lambda i: sm90.gemm_nt(*sets[i % n], config=cfg)
    ms = medians(bench_interleaved(fns, rounds=rounds, inner=3, graph=True, order="shuffle"))
    stamps = []
    for i in range(probes + 1):
        _, p = sm90.gemm_nt_probe(sets[i % n][0], sets[i % n][1], sets[i % n][2], config=whole)
        torch.cuda.synchronize()
        if i:  # the first launch builds
            stamps.append(summarize(p.cpu().numpy(), ms["ours"]))
    row = dict(M=M, N=N, K=K, config=label, ours_ms=ms["ours"], cublas_ms=ms["cublas"],
               ours_sk_ms=ms.get("ours_sk", float("nan")))
    row.update({k: float(np.median([s[k] for s in stamps])) for k in stamps[0]})
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES), help="M,N,K,CONFIG entries")
    p.add_argument("--rounds", type=int, default=20, help="interleaved rounds of ours against cuBLAS")
    p.add_argument("--probes", type=int, default=5, help="probe launches per shape (after one to build)")
    p.add_argument("--out", required=True, help="CSV to write (with a .meta.json sidecar)")
    args = p.parse_args(argv)
    try:
        shapes = [parse_shape(s) for s in args.shapes]
    except ValueError as exc:
        p.error(str(exc))
    if args.probes < 1 or args.rounds < 1:
        p.error("--probes and --rounds: at least 1")
    from fo_lib.gemm import sm90
    if not sm90.is_supported():
        sys.exit("probe_sm90_timeline: needs a compute capability 9.0 GPU")
    import pandas as pd

    from fo_lib.provenance import write_result
    rows = []
    for M, N, K, label in shapes:
        r = probe_shape(M, N, K, label, args.rounds, args.probes)
        rows.append(r)
        print(f"{M}x{N}x{K} {label}: cuBLAS/ours {r['cublas_ms'] / r['ours_ms']:.3f}"
              + (f" (+sk {r['cublas_ms'] / r['ours_sk_ms']:.3f})" if r['ours_sk_ms'] == r['ours_sk_ms'] else "")
              + f" | units {r['units']} x cadence {r['cadence_us']:.2f} us = {r['steady_us']:.1f}, kernel"
              f" {r['kernel_us']:.1f} (overhead {r['overhead_us']:.1f}, ends {r['ends_us']:.1f}, skew"
              f" {r['skew_us']:.2f}, last unit {r['last_unit_us']:.1f}, imbalance {r['imbalance_us']:.1f})", flush=True)
    write_result(pd.DataFrame(rows), args.out, rounds=args.rounds, probes=args.probes,
                 command="probe_sm90_timeline.py " + " ".join(argv if argv is not None else sys.argv[1:]))


if __name__ == "__main__":
    main()
