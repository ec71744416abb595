"""Where does a loopback collective's first group lose its time beside the GEMM? (an experiment)

The emulated link moves its bytes with the copy engines, then finishes each collective on the
device: AllReduce scales in place (``mul_``), ReduceScatter copies and scales its chunk, All-to-All
and AllGather repeat a slice ``W`` times. Only those finishing steps need SMs, and beside a running
GEMM they get the few the GEMM leaves free. This records the timeline of
:func:`fo_lib.experiments.timeline.measure` for each primitive with variants of the finishing step
(timing only: a variant may leave wrong values):

* ``current``: the communicator as it is;
* ``torch_ops``: the finishing steps as torch ops, as the link had them before session 6 (scale
  with ``mul_``, ReduceScatter's chunk copied first, All-to-All / AllGather repeated by one
  broadcast kernel with a stride-0 source);
* ``no_finish``: bytes through the link only, no finishing step at all.

    python scripts/probe_loopback_finish.py --out /tmp/probe.csv
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def variants(world: int) -> dict:
    from fo_lib.comm.loopback import LoopbackCommunicator
    from fo_lib.comm.virtual import repeat as torch_repeat, sum_of_copies as torch_sum_of_copies

    class TorchOps(LoopbackCommunicator):
        def _repeat(self, src, dst):
            torch_repeat(src, dst, self.world_size)

        def _sum_of_copies(self, src, dst):
            torch_sum_of_copies(src, dst, self.world_size)

    class NoFinish(LoopbackCommunicator):  # the link's bytes only (the same _transfer volumes)
        def _repeat(self, src, dst):
            pass

        def _sum_of_copies(self, src, dst):
            pass

    return {"current": LoopbackCommunicator(world), "torch_ops": TorchOps(world),
            "no_finish": NoFinish(world)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)

    import pandas as pd

    from fo_lib.experiments import timeline
    from fo_lib.provenance import write_result

    frames = []
    for name, comm in variants(args.world).items():
        df = timeline.measure(comm, shapes=timeline.LOOPBACK_SHAPES, repeats=args.repeats, world=args.world)
        frames.append(df.assign(variant=name))
    df = pd.concat(frames, ignore_index=True)
    write_result(df, Path(args.out), link=str(df.link.iloc[0]), world_size=args.world)
    groups = df[df.span == "group"].assign(ms=lambda d: d.end_ms - d.start_ms)
    table = groups.pivot_table(index=["variant", "primitive", "group"], columns="source", values="ms").round(3)
    table["ratio"] = (table["measured"] / table["model"]).round(2)
    gemm = df[(df.span == "gemm") & (df.source == "measured")].set_index(["variant", "primitive"]).end_ms.round(3)
    print(table.to_string())
    print("GEMM end (ms):", gemm.to_dict())
    return 0


if __name__ == "__main__":
    sys.exit(main())
