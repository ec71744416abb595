"""Record the measured timeline of one overlapped call per shape (notebook 07): CUDA events around
the GEMM, each wave group's wait and collective, and the post-reorder, beside the refined model's
timeline for the same partition (fo_lib.experiments.timeline).

    python scripts/record/record_timeline.py                                  # one GPU, loopback -> data/<gpu>/
    torchrun --nproc_per_node 2 scripts/record/record_timeline.py --out data/h200x2   # NCCL
    torchrun --nproc_per_node 2 scripts/record/record_timeline.py --copy-engine --out data/h200x2/copy_engine

Under torchrun the shapes are one GEMM-heavy and one communication-heavy AllReduce; rank 0 writes.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="data folder (default data/<gpu>/, or data/<gpu>x<W>/ under torchrun)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--copy-engine", action="store_true",
                    help="NCCL only: the AllReduce as an in-place AllGather per group on the copy engines "
                         "(TorchDistCommunicator(copy_engine=True)), summed by the post-reorder")
    args = ap.parse_args(argv)

    from fo_lib.experiments import measured_set, timeline
    from fo_lib.provenance import DATA_DIR, write_result

    if "RANK" in os.environ:
        from fo_lib.comm.torch_dist import init_from_env, shutdown
        comm = init_from_env("nccl")
        if args.copy_engine:
            from fo_lib.comm.torch_dist import TorchDistCommunicator
            comm = TorchDistCommunicator(copy_engine=True)
        df = timeline.measure(comm, shapes=timeline.NCCL_SHAPES, repeats=args.repeats,
                              reduction="post_reorder" if args.copy_engine else "collective")
        out = Path(args.out) if args.out else DATA_DIR / measured_set(world=comm.world_size)
    else:
        if args.copy_engine:
            ap.error("--copy-engine needs NCCL (run under torchrun)")
        comm, shutdown = None, None
        df = timeline.measure(shapes=timeline.LOOPBACK_SHAPES, repeats=args.repeats)
        out = Path(args.out) if args.out else DATA_DIR / measured_set()
    if comm is None or comm.rank == 0:
        path = write_result(df, out / f"{timeline.NAME}.csv", link=str(df.link.iloc[0]),
                            world_size=comm.world_size if comm is not None else 2)
        measured = df[df.source == "measured"]
        print(measured.groupby(["primitive", "M", "N", "K", "partition", "span"]).agg(
            n=("group", "size"), first_ms=("start_ms", "min"), last_ms=("end_ms", "max")).round(3).to_string())
        print("wrote", path)
    if shutdown is not None:
        shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
