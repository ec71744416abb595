"""The multi-GPU measurements with NCCL, one process per GPU (run under torchrun):

* ``nccl_curves.csv``: latency and bus bandwidth of AllReduce, ReduceScatter and All-to-All against
  message size at this world size;
* ``nccl_footprint.csv``: the SMs each collective takes from a GEMM running beside it (the CTA count
  of NCCL's kernels, and the GEMM CTAs it delays: see ``fo_lib.tuning.measure_sm_footprint``);
* ``overlap_nccl.csv`` (+ ``_candidates.csv``, ``_profiles.json``): the speedup sweep over the paper's
  evaluation shapes and Llama-3-70B TP=8 layers, overlapped vs sequential (torch.matmul + NCCL) vs
  decomposition vs PyTorch's symmetric-memory fused matmul+ReduceScatter, predicted vs best partition.
  The GEMM keeps the measured AllReduce footprint free (``--comm-sms`` overrides).

    torchrun --nproc_per_node 2 scripts/bench_nccl.py --out data/h200x2 [--quick]

Every file gets a provenance sidecar; rank 0 writes them. NCCL_NVLS_ENABLE=0 is set (no NVLink
multicast on the lent machines).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

PRIMITIVES = ("all_reduce", "reduce_scatter", "all_to_all")


def curve_rows(curve) -> list[dict]:
    bus = curve.bus_bandwidth_gbps()
    return [dict(primitive=curve.primitive, world=curve.world_size, bytes=int(b), ms=float(t), bus_gbps=float(g))
            for (b, t), g in zip(curve.points, bus)]


def sweep_shapes(quick: bool) -> dict:
    from fo_lib.experiments.overlap import LLAMA70B_TP8_SHAPES, PAPER_SHAPES
    if quick:
        return {"all_reduce": [(4096, 8192, 8192), (8192, 8192, 3584)],
                "reduce_scatter": [(4096, 8192, 8192)], "all_to_all": [(2048, 8192, 8192)]}
    return {"all_reduce": PAPER_SHAPES["all_reduce"] + LLAMA70B_TP8_SHAPES,
            "reduce_scatter": PAPER_SHAPES["reduce_scatter"] + LLAMA70B_TP8_SHAPES[:3],
            "all_to_all": PAPER_SHAPES["all_to_all"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="data folder, e.g. data/h200x2")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--comm-sms", type=int, default=None, help="SMs the GEMM leaves free (default: measured)")
    ap.add_argument("--candidates", type=int, default=10)
    ap.add_argument("--skip", nargs="*", default=[], choices=("curves", "footprint", "sweep"))
    args = ap.parse_args(argv)

    import pandas as pd
    import torch

    from fo_lib import tuning
    from fo_lib.comm.torch_dist import init_from_env
    from fo_lib.experiments.overlap import link_label, measure, write_records
    from fo_lib.provenance import write_result

    comm = init_from_env("nccl")
    W, root = comm.world_size, comm.rank == 0
    out = Path(args.out)
    link = link_label(comm)
    meta = dict(world_size=W, link=link)

    def say(msg):
        if root:
            print(msg, flush=True)

    if "curves" not in args.skip:
        rows = []
        for prim in PRIMITIVES:
            curve = comm.broadcast_object(tuning.measure_curve(comm, prim, tuning.default_sizes(1 << 30, min_bytes=16 << 10)))
            rows += curve_rows(curve)
            big = max(curve.points)
            say(f"curve {prim:>14}: {len(curve.points)} sizes, {big[0] / 2**20:.0f} MiB in {big[1]:.3f} ms "
                f"(bus {curve.bus_bandwidth_gbps()[-1]:.0f} GB/s)")
        if root:
            write_result(pd.DataFrame(rows), out / "nccl_curves.csv", **meta)

    comm_sms = args.comm_sms
    if "footprint" not in args.skip:
        rows = [comm.broadcast_object(tuning.measure_sm_footprint(comm, prim)) for prim in PRIMITIVES]
        for r in rows:
            say(f"footprint {r['primitive']:>14}: {r['collective_ctas']} CTAs x {r['collective_threads']} threads, "
                f"GEMM CTAs delayed {r['sms_taken']} (runs {r['sms_taken_runs']}), {r['collective_ms']:.3f} ms "
                f"for {r['message_bytes'] / 2**20:.0f} MiB")
        if root:
            write_result(pd.DataFrame(rows), out / "nccl_footprint.csv", **meta)
        if comm_sms is None:
            comm_sms = max(r["sms_taken"] for r in rows)
    comm_sms = comm.sm_footprint if comm_sms is None else comm_sms
    say(f"GEMM leaves {comm_sms} SMs to communication")

    if "sweep" not in args.skip:
        summary, cands, saved = measure(comm, quick=args.quick, shapes=sweep_shapes(args.quick),
                                        candidates_limit=args.candidates, comm_sms=comm_sms)
        if root:
            write_records(summary, cands, saved, out / "overlap_nccl.csv", world=W, comm_sms=comm_sms, link=link)
            heavy = summary[(summary.primitive == "all_reduce") & (summary.comm_over_cublas >= 0.3)]
            print(f"AllReduce, comm >= 30% of cuBLAS GEMM ({len(heavy)} shapes): median tuned speedup vs "
                  f"sequential {heavy.tuned_speedup_vs_sequential.median():.3f}; worst shape overall "
                  f"{summary.tuned_speedup_vs_sequential.min():.3f}; predicted within 3% of best in "
                  f"{(summary.predicted_vs_best <= 1.03).mean():.0%} of shapes", flush=True)
            cols = ["primitive", "M", "N", "K", "cublas_ms", "gemm_ms", "comm_ms", "sequential_ms", "decomp2_ms",
                    "symm_mem_fused_ms", "overlap_predicted_ms", "best_ms", "tuned_ms", "tuned_speedup_vs_sequential"]
            print(summary[cols].round(3).to_string(index=False), flush=True)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
