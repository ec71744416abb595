"""Overlapped GEMM + collective vs sequential vs decomposition on one GPU over the loopback
(emulated) link, and the predicted partition vs the best measured one.

Per primitive and shape: the GEMM profile (probe) and the link's latency curve are measured, the
refined model picks a partition, and in interleaved rounds we time: sequential (torch.matmul then
the collective), decomposition (2 and 4 chunks), the overlapped op with the predicted partition,
with no overlap (one group), the finest partition, and a sample of other partitions (all of them
when there are few). Overlap efficiency = (T_seq - T_ovl) / (T_seq - max(T_gemm, T_comm)).

    python scripts/bench/bench_overlap.py --out overlap_loopback.csv [--quick] [--world 2]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib.experiments.overlap import load_model_params, measure, write_records  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--primitives", nargs="*", default=["all_reduce", "reduce_scatter", "all_to_all"])
    ap.add_argument("--candidates", type=int, default=12)
    ap.add_argument("--comm-sms", type=int, default=4,
                    help="SMs left free for the communication side (wait kernel, the link's reduction "
                         "kernels): the GEMM runs on SMs - comm_sms persistent CTAs")
    ap.add_argument("--host-overhead", action="store_true",
                    help="also measure the host time per call, eager vs CUDA graph (<out>_host_overhead.csv)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the speedup sweep (with --host-overhead)")
    ap.add_argument("--layout", default="tiles", choices=("tiles", "rows"),
                    help="the AllReduce plans' layout (fo_lib.engine.OverlapPlan)")
    ap.add_argument("--model-params", default="none",
                    help="JSON file with the refined model's parameters per primitive (a calibration sidecar "
                         "of scripts/record/calibrate_overlap.py, fitted on an earlier run), 'auto' (the sidecar "
                         "beside --out if there is one) or 'none' (launch_ms 0.01, no slowdowns)")
    args = ap.parse_args(argv)
    if args.host_overhead:
        from fo_lib.experiments.overlap import LINK, host_overhead
        from fo_lib.provenance import write_result

        ho = host_overhead(world=args.world)
        out = Path(args.out)
        write_result(ho, out.with_name(out.stem + "_host_overhead.csv"), world_size=args.world, link=LINK)
        print(ho.round(3).to_string(index=False), flush=True)
    if args.no_sweep:
        return
    model_kw = None if args.model_params == "none" else load_model_params(
        args.model_params, Path(args.out).with_name("overlap_calibration.meta.json"))
    df, cand, saved = measure(world=args.world, quick=args.quick, primitives=args.primitives,
                              candidates_limit=args.candidates, comm_sms=args.comm_sms, layout=args.layout,
                              model_kw=model_kw)
    write_records(df, cand, saved, args.out, world=args.world, comm_sms=args.comm_sms)
    heavy = df[df.comm_over_gemm >= 0.3]
    within = (df.predicted_vs_best <= 1.03).mean()
    print(f"comm >= 30% of GEMM ({len(heavy)} shapes): median overlap efficiency vs torch.matmul+comm "
          f"{heavy.overlap_efficiency.median():.3f}, vs our GEMM+comm {heavy.overlap_efficiency_same_gemm.median():.3f}; "
          f"predicted within 3% of best in {within:.0%} of shapes; median speedup vs sequential "
          f"{df.speedup_vs_sequential.median():.3f} (vs our GEMM then comm {df.speedup_vs_ours_sequential.median():.3f})")


if __name__ == "__main__":
    main()
