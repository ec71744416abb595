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
The measuring core is fo_lib.experiments.kernel_bench, which notebook 06 runs in measure mode.

    python scripts/bench/bench_postops.py --out postops.csv
    python scripts/bench/bench_postops.py --quick --out postops.csv --tpr 256 512 1024   # also other block widths
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from fo_lib.experiments import kernel_bench as kb  # noqa: E402  (the measuring core, shared with notebook 06)
from fo_lib.provenance import write_result  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="CSV file to write")
    p.add_argument("--quick", action="store_true", help="fewer rounds")
    p.add_argument("--dtype", default="bf16", choices=kb.DTYPES)
    p.add_argument("--R", type=int, nargs="*", default=list(kb.POSTOPS_SHAPES["R"]))
    p.add_argument("--N", type=int, nargs="*", default=list(kb.POSTOPS_SHAPES["N"]))
    p.add_argument("--BN", type=int, default=128)
    p.add_argument("--no-graph", action="store_true", help="time eager launches instead of CUDA graphs")
    p.add_argument("--tpr", type=int, nargs="*", default=[], help="also time ours_rms with these threads_per_row")
    args = p.parse_args(argv)
    import torch

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, dtype {args.dtype}, BN {args.BN}", flush=True)
    df = kb.run_postops(kb.shape_grid(args.R, args.N), dtype=args.dtype, BN=args.BN,
                        rounds=kb.postops_rounds(args.quick), graph=not args.no_graph, tprs=args.tpr,
                        log=lambda line: print(line, flush=True))
    write_result(df, args.out, link="none", dtype=args.dtype)
    rms = df[df.variant == "ours_rms"]
    ratio = rms.ratio.astype(float)
    worst = rms.loc[ratio.idxmax()]
    print(f"post-reorder RMSNorm / torch rms_norm: median {np.median(ratio):.3f} over {len(rms)} shapes")
    print(f"worst ours_rms / torch_rms = {worst['ratio']} at R={worst['R']} N={worst['N']} (target <= 1.05); "
          f"wrote {args.out}")


if __name__ == "__main__":
    main()
