"""Where the Hopper GEMM's instructions go, against cuBLAS's, opcode by opcode.

Nsight Compute found ours issuing 1.7-2.8 times the warp instructions of cuBLAS's kernel on the same
shapes (docs/decisions.md, "The k-loop steps its wgmma descriptors on the uniform datapath"). For each shape, one launch of ours and one of torch.matmul are
profiled by ``ncu --section SourceCounters`` (each alone, inside the NVTX range "profile", after a
warm-up outside it), their source pages exported with ``--print-source sass``, and the executed warp
instructions summed per SASS opcode per unit of work (a 128 x 128 x 64 block of multiply-adds,
:data:`fo_lib.reports.ncu.UNIT_MACS`: kernels of different tiles compare per the same work).
Writes ``summary.csv`` (+ provenance) and the source pages as ``<M>x<N>x<K>_<kernel>.csv.gz``;
prints the opcodes side by side, the largest difference first.

    python scripts/profile/profile_sm90_sass.py --out-dir sass/                 # runs ncu on itself
    python scripts/profile/profile_sm90_sass.py --out-dir sass/ --shape 1100 1792 5120 128x128x64c2p/row2
"""
from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profile_sm90_vs_cublas import launch, parse_label  # noqa: E402

from fo_lib.reports.ncu import SOURCE_EXPORT, opcode_mix, profile_and_export, read_source_csv  # noqa: E402

KERNELS = ("ours", "cublas")
# Same tile and waves as cuBLAS's kernel there (128 x 256 against its 256 x 128 cooperative one).
DEFAULT_SHAPE = ("2048", "4096", "7168", "128x256x64/row8")


def side_by_side(rows, top: int = 20):
    """Per shape: opcodes x kernels of instructions per unit of work, the ``top`` with the largest
    difference (ours - cuBLAS) first, then a ``total`` row over every opcode."""
    import pandas as pd

    df = pd.DataFrame(rows)
    out = []
    for (M, N, K), g in df.groupby(["M", "N", "K"], sort=False):
        t = g.pivot_table(index="opcode", columns="kernel", values="per_unit", aggfunc="sum", fill_value=0.0)
        t = t.reindex(columns=list(KERNELS), fill_value=0.0)
        t["ours - cublas"] = t["ours"] - t["cublas"]
        t = t.sort_values("ours - cublas", key=abs, ascending=False)
        total = t.sum().rename("total")
        t = pd.concat([t.head(top), total.to_frame().T])
        t.insert(0, "shape", f"{M}x{N}x{K}")
        out.append(t.round(2))
    return pd.concat(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out-dir", type=Path, help="where the source pages and the summary go")
    p.add_argument("--shape", nargs=4, action="append", metavar=("M", "N", "K", "CONFIG"),
                   help="a shape and our config's label (default 2048 4096 7168 128x256x64/row8); repeatable")
    p.add_argument("--ncu", default="ncu")
    p.add_argument("--launch", choices=KERNELS, help=argparse.SUPPRESS)  # ncu's target
    args = p.parse_args(argv)
    shapes = [(int(m), int(n), int(k), c) for m, n, k, c in (args.shape or [DEFAULT_SHAPE])]
    for *_, label in shapes:
        parse_label(label)  # a bad label stops here, before any ncu run
    if args.launch:
        M, N, K, label = shapes[0]
        launch(M, N, K, label, which=(args.launch,))
        return
    if not args.out_dir:
        p.error("--out-dir is required")
    import pandas as pd

    from fo_lib._util import atomic_path
    from fo_lib.provenance import write_result

    args.out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for M, N, K, label in shapes:
        for which in KERNELS:
            tag = f"{M}x{N}x{K}_{which}"
            page = profile_and_export(
                args.ncu, ["--clock-control", "none", "--nvtx", "--nvtx-include", "profile/", "--section",
                           "SourceCounters", "--section", "WarpStateStats", "--launch-count", "1"],
                [sys.executable, __file__, "--launch", which, "--shape", str(M), str(N), str(K), label],
                args.out_dir / f"{tag}.ncu-rep", SOURCE_EXPORT)
            # The archive is renamed into place once closed: an interrupted run leaves no truncated .gz.
            with atomic_path(args.out_dir / f"{tag}.csv.gz") as tmp, gzip.open(tmp, "wt") as f:
                f.write(page)
            rows += opcode_mix(read_source_csv(page), M, N, K, kernel=which,
                               config=label if which == "ours" else "torch.matmul")
    write_result(pd.DataFrame(rows), args.out_dir / "summary.csv", link="none", clocks="none (ncu --clock-control none)",
                 unit_macs="128 x 128 x 64")
    print("warp instructions per 128 x 128 x 64 block of work, by SASS opcode:")
    print(side_by_side(rows).to_string())


if __name__ == "__main__":
    main()
