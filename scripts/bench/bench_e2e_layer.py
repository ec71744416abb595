"""Fig. 12 / Table 4: one transformer layer (Llama 3 70B TP block, Mixtral 8x7B MoE combine step)
with its projections overlapped against the same layer with torch.matmul + one collective each.

Each layer is built from one seed with the same weights in both versions, checked against the
float64 reference of the whole layer (``rel_err``), then timed in interleaved rounds (medians).

    python scripts/bench/bench_e2e_layer.py --out data/h200/e2e_layer.csv [--quick] [--world 2 8]
    torchrun --nproc_per_node 2 scripts/bench/bench_e2e_layer.py --out data/h200x2/e2e_layer.csv [--quick]
    python scripts/bench/bench_e2e_layer.py --device cpu          # the CPU check only (no GPU, no timing)

One GPU: the loopback link of W identical virtual ranks ("emulated"), W each layer's Table 4
degree unless --world is given. Under torchrun: NCCL (gloo with --device cpu, the check only).
Writes ``--out`` (CSV) and its provenance sidecar ``.meta.json``; under torchrun rank 0 writes.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="CSV to write (required on a GPU)")
    ap.add_argument("--quick", action="store_true", help="the short set (4096 / 8192 tokens)")
    ap.add_argument("--world", type=int, nargs="+", help="virtual ranks of the loopback link (one GPU)")
    ap.add_argument("--attention", default="sdpa", choices=("sdpa", "self"),
                    help="the dense block's attention: causal SDPA, or the stand-in where each token sees itself")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = ap.parse_args(argv)

    comm = None
    if "WORLD_SIZE" in os.environ:  # under torchrun: every rank runs this
        from fo_lib.comm.torch_dist import init_from_env
        comm = init_from_env("nccl" if args.device == "cuda" else "gloo")
    try:
        return _run(args, comm, comm is None or comm.rank == 0, ap)
    finally:
        if comm is not None:
            from fo_lib.comm.torch_dist import shutdown
            shutdown()


def _run(args, comm, root: bool, ap) -> int:
    from fo_lib.experiments import e2e_layer

    if args.device == "cpu":
        df = e2e_layer.cpu_check(**({"worlds": args.world} if args.world else {}), attention=args.attention,
                                 seed=args.seed, comm=comm)
        if root:
            print(df.to_string(index=False), flush=True)
            print(f"e2e cpu check: {'ok' if df.ok.all() else 'FAILED'}", flush=True)
        return 0 if df.ok.all() else 1
    import torch

    if not torch.cuda.is_available():
        ap.error("no CUDA GPU here: --device cpu runs the CPU check")
    if not args.out:
        ap.error("--out is required on a GPU")
    df = e2e_layer.measure(comm, worlds=args.world, quick=args.quick, rounds=args.rounds, attention=args.attention,
                           seed=args.seed)
    bad = df[~(df.rel_err < e2e_layer.TOLERANCE)]
    if root:
        e2e_layer.record(df, args.out, quick=args.quick, attention=args.attention, seed=args.seed)
        print(e2e_layer.summary(df).to_string(), flush=True)
        if len(bad):
            print(f"e2e: {len(bad)} layer(s) over the tolerance {e2e_layer.TOLERANCE:g}:\n{bad.to_string(index=False)}")
    return 1 if len(bad) else 0


if __name__ == "__main__":
    sys.exit(main())
