"""The multi-GPU measurements with NCCL, one process per GPU (run under torchrun):

* ``nccl_curves.csv``: latency and bus bandwidth of AllReduce, ReduceScatter and All-to-All against
  message size at this world size;
* ``nccl_footprint.csv``: the SMs each collective takes from a GEMM running beside it (the CTA count
  of NCCL's kernels, and the GEMM CTAs it delays: see ``fo_lib.partition_tuning.measure_sm_footprint``);
* ``overlap_nccl.csv`` (+ ``_candidates.csv``, ``_profiles.json``): the speedup sweep over the paper's
  evaluation shapes and Llama-3-70B TP=8 layers, overlapped vs sequential (torch.matmul + NCCL) vs
  decomposition vs PyTorch's symmetric-memory fused matmul+ReduceScatter, predicted vs best partition.
  One sweep per NCCL CTA budget (``--ctas``; 0 = NCCL's own choice): the GEMM leaves the measured
  footprint of that budget free. ``tuned_ms`` per budget is what the tuner runs (predicted partition
  or the cuBLAS + NCCL fallback); the printed summary lets the tuner also pick the budget.

    torchrun --nproc_per_node 2 scripts/bench/bench_nccl.py --out data/h200x2 [--quick] [--ctas 8 16 0]

Every file gets a provenance sidecar; rank 0 writes them. NCCL_NVLS_ENABLE=0 is set (no NVLink
multicast on the lent machines).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
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


def report(summary) -> None:
    from fo_lib.experiments.multi_gpu import bar_summary, tuner_pick

    picked = tuner_pick(summary)
    for mode in ("eager", "graph", "checked"):
        bar = bar_summary(picked, mode=mode)
        print(f"tuner ({mode}; partition, fallback and NCCL CTA budget chosen by prediction"
              f"{', kept only if it wins its timing check' if mode == 'checked' else ''}) vs cuBLAS then NCCL: "
              f"AllReduce with comm >= 30% of the GEMM ({bar['allreduce_shapes']} shapes): median "
              f"{bar['allreduce_median_speedup']:.3f}x; worst shape {bar['worst_speedup']:.3f}x; best "
              f"{bar['max_speedup']:.3f}x", flush=True)
    cols = ["primitive", "M", "N", "K", "nccl_max_ctas", "comm_sms", "cublas_ms", "gemm_ms", "comm_ms", "reference_ms",
            "tuner_overlaps", "tuner_keeps_overlap", "predicted_partition", "tuned_eager_ms", "tuned_graph_ms",
            "tuned_graph_speedup", "tuned_checked_speedup",
            "best_eager_speedup", "decomposition_speedup", "symm_mem_speedup"]
    print(picked[cols].round(3).to_string(index=False), flush=True)


def write_all(out, meta, curves, footprints, summaries, cand_frames, saved_all, W, link) -> None:
    import pandas as pd

    from fo_lib.experiments.overlap import write_records
    from fo_lib.provenance import write_result

    if curves:
        write_result(pd.DataFrame(curves), out / "nccl_curves.csv", **meta)
    if footprints:
        write_result(pd.DataFrame(footprints), out / "nccl_footprint.csv", **meta)
    if summaries:
        write_records(pd.concat(summaries, ignore_index=True), pd.concat(cand_frames, ignore_index=True), saved_all,
                      out / "overlap_nccl.csv", world=W, comm_sms="measured per primitive and budget (column comm_sms)",
                      link=link, nccl_env=meta["nccl_env"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="data folder, e.g. data/h200x2")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ctas", type=int, nargs="+", default=[0, 16, 8],
                    help="NCCL CTA budgets to sweep (0: NCCL's default); the GEMM leaves the measured footprint free")
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--model-params", default="auto",
                    help="JSON file with the refined model's parameters per primitive, or a calibration "
                         "sidecar (fitted_on_all_shapes); 'auto': <out>/overlap_nccl_calibration.meta.json if it "
                         "exists (fitted on an earlier run), else the uncalibrated defaults")
    ap.add_argument("--schedule", default="persistent", choices=("persistent", "per_tile"),
                    help="the GEMM's CTA schedule (fo_lib.engine.OverlapPlan): persistent CTAs leaving the "
                         "footprint free, or one CTA per tile sharing SMs with NCCL's high-priority CTAs")
    ap.add_argument("--skip", nargs="*", default=[], choices=("curves", "sweep"))
    ap.add_argument("--layout", default="tiles", choices=("tiles", "rows"),
                    help="the AllReduce plans' layout (fo_lib.engine.OverlapPlan): tile slots gathered back by "
                         "the post-reorder, or groups of whole tile rows stored in place")
    ap.add_argument("--primitives", nargs="+", default=list(PRIMITIVES), choices=PRIMITIVES)
    ap.add_argument("--copy-engine", action="store_true",
                    help="after the budgets, one more AllReduce / ReduceScatter sweep: plans with "
                         "reduction='post_reorder' (an in-place AllGather, or an All-to-All of each rank's chunks, "
                         "per group, summed by the post-reorder) on a communicator with NCCL's zero-CTA policy "
                         "(copy engines, buffers in symmetric windows), the GEMM on every SM but the wait "
                         "kernel's; baselines on NCCL's default communicator")
    ap.add_argument("--copy-engine-first", action="store_true",
                    help="run the copy-engine sweep before the budgets' (a GPU that drifts over the call, e.g. "
                         "at its power cap, then favours the other section: swap to see the order's effect)")
    args = ap.parse_args(argv)

    import pandas as pd

    from fo_lib import partition_tuning
    from fo_lib.comm.torch_dist import init_from_env
    from fo_lib.experiments.overlap import link_label, load_model_params, measure

    model_kw = load_model_params(args.model_params, Path(args.out) / "overlap_nccl_calibration.meta.json")
    comm = init_from_env("nccl")
    W, root = comm.world_size, comm.rank == 0
    out = Path(args.out)
    link = link_label(comm)
    meta = dict(world_size=W, link=link, nccl_env={k: v for k, v in os.environ.items() if k.startswith("NCCL_")})

    def say(msg):
        if root:
            print(msg, flush=True)

    from fo_lib.comm.torch_dist import TorchDistCommunicator

    curves, footprints, summaries, cand_frames, saved_all = [], [], [], [], {}

    def keep(key, measured):
        """One sweep's records, written at once, so that a run cut short keeps what it measured."""
        summary, cands, saved = measured
        summaries.append(summary)
        cand_frames.append(cands)
        saved_all[key] = saved
        if root:
            write_all(out, meta, curves, footprints, summaries, cand_frames, saved_all, W, link)

    ce_prims = [p for p in ("all_reduce", "reduce_scatter") if p in args.primitives]

    def copy_engine_sweep():
        c = TorchDistCommunicator(copy_engine=True)
        say("[copy engine] AllReduce as AllGather, ReduceScatter as All-to-All, each summed by the post-reorder; "
            "GEMM leaves 1 SM")
        keep("copy_engine", measure(c, quick=args.quick, shapes=sweep_shapes(args.quick), primitives=ce_prims,
                                    candidates_limit=args.candidates, comm_sms={p: c.sm_footprint for p in ce_prims},
                                    model_kw=model_kw, schedule=args.schedule, reduction="post_reorder",
                                    baseline_comm=comm))

    copy_engine = args.copy_engine and "sweep" not in args.skip and bool(ce_prims)
    if copy_engine and args.copy_engine_first:
        copy_engine_sweep()
    for budget in args.ctas:
        c = comm if budget == 0 else TorchDistCommunicator(max_ctas=budget)
        tag = f"NCCL CTAs {'default' if budget == 0 else budget}"
        # A bounded CTA budget applies to AllReduce and ReduceScatter; All-to-All (grouped send/recv)
        # stalled under min=max=8 CTAs on 2 H200s, so it keeps NCCL's own choice.
        prims = [p for p in args.primitives if budget == 0 or p != "all_to_all"]
        if "curves" not in args.skip:
            for prim in prims:
                sizes = partition_tuning.default_sizes(1 << 30, min_bytes=16 << 10)
                curve = c.broadcast_object(partition_tuning.measure_curve(c, prim, sizes))
                curves += [r | {"nccl_max_ctas": budget} for r in curve_rows(curve)]
                big = max(curve.points)
                say(f"[{tag}] curve {prim:>14}: {len(curve.points)} sizes, {big[0] / 2**20:.0f} MiB in "
                    f"{big[1]:.3f} ms (bus {curve.bus_bandwidth_gbps()[-1]:.0f} GB/s)")
        free = {}
        for prim in prims:
            r = c.broadcast_object(partition_tuning.measure_sm_footprint(c, prim))
            footprints.append(r | {"nccl_max_ctas": budget})
            free[prim] = r["footprint"]
            say(f"[{tag}] footprint {prim:>14}: {r['collective_ctas']} CTAs x {r['collective_threads']} threads, "
                f"GEMM CTAs delayed {r['sms_taken']} (runs {r['sms_taken_runs']}), {r['collective_ms']:.3f} ms "
                f"for {r['message_bytes'] / 2**20:.0f} MiB -> GEMM leaves {free[prim]} SMs")
        if "sweep" not in args.skip:
            keep(str(budget), measure(c, quick=args.quick, shapes=sweep_shapes(args.quick), primitives=prims,
                                      candidates_limit=args.candidates, comm_sms=free, model_kw=model_kw,
                                      schedule=args.schedule, layout=args.layout))
        elif root:  # the curves and footprints of this budget
            write_all(out, meta, curves, footprints, summaries, cand_frames, saved_all, W, link)
    if copy_engine and not args.copy_engine_first:
        copy_engine_sweep()
    if root and summaries:
        report(pd.concat(summaries, ignore_index=True))
    from fo_lib.comm.torch_dist import shutdown
    shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
