"""Where the portable GEMM's epilogue variants spend their cycles, instruction by instruction.

For each shape and variant, one launch is profiled by ``ncu --section SourceCounters`` (base clocks)
and its per-instruction table (SASS, executed count, warp stall samples by reason) is exported with
``ncu --page source --csv --print-source sass``. Each instruction is put in a class by how often a
warp executes it per tile it computes (:func:`fo_lib.reports.ncu.classify`, which also reads ncu's
source page):

* ``k-tile``: about once per k-tile (the main loop's hot path);
* ``tile``: about once per tile (the top of a tile, the load cursor's move, the epilogue);
* ``rare``: less than once per tile (the release, done by one thread; the kernel's start and end);
* ``never``: not executed (stall samples still land there, e.g. on a branch's target).

The summary (``summary.csv`` with its provenance sidecar) sums the stall samples and executed
instructions per class, and per stall reason, for every variant; the difference between the plain
kernel and a signal kernel on one shape says where the signal's extra time goes (docs/decisions.md,
"Tile coordinates by multiply-high, not division"). The per-instruction tables are kept as ``<M>x<N>x<K>_<variant>.csv.gz``.

    python scripts/profile/profile_stall_sites.py --out-dir stalls/          # runs ncu on itself
"""
from __future__ import annotations

import argparse
import gzip
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profile_signal_cost import launch, parse_shape  # noqa: E402

from fo_lib.reports.ncu import (KERNEL_OF, SOURCE_EXPORT, classify, profile_and_export,  # noqa: E402
                               read_source_csv, summarize)

DEFAULT_VARIANTS = ("plain", "signal_rows", "signal_tiles", "signal_rows_no_group")
DEFAULT_SHAPES = ("8192x8192x1024", "8192x8192x8192")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, help="where the per-instruction tables and the summary go")
    p.add_argument("--shapes", type=parse_shape, nargs="*", default=[parse_shape(s) for s in DEFAULT_SHAPES])
    p.add_argument("--variants", nargs="*", default=list(DEFAULT_VARIANTS), choices=list(KERNEL_OF))
    p.add_argument("--keep-reports", action="store_true", help="keep ncu's .ncu-rep files (~1 MB each)")
    p.add_argument("--ncu", default="ncu")
    p.add_argument("--launch", action="store_true", help=argparse.SUPPRESS)  # ncu's target
    args = p.parse_args(argv)
    if args.launch:
        launch(args.shapes, 1, args.variants)
        return
    if not args.out_dir:
        p.error("--out-dir is required")
    import pandas as pd

    from fo_lib import gemm
    from fo_lib._util import atomic_path
    from fo_lib.provenance import write_result

    args.out_dir.mkdir(parents=True, exist_ok=True)
    sms = gemm.sm_count()
    rows = []
    for M, N, K in args.shapes:
        cfg = gemm.default_config(M, N, K, sms)
        warp_tiles = math.ceil(M / cfg.BM) * math.ceil(N / cfg.BN) * cfg.threads // 32
        k_tiles = math.ceil(K / cfg.BK)
        for name in args.variants:
            tag = f"{M}x{N}x{K}_{name}"
            page = profile_and_export(
                args.ncu, ["--clock-control", "base", "--section", "SourceCounters", "--section", "WarpStateStats",
                           "-k", f"regex:fo_gemm_nt_.*_{KERNEL_OF[name]}$", "--launch-count", "1"],
                [sys.executable, __file__, "--launch", "--shapes", f"{M}x{N}x{K}", "--variants", name],
                args.out_dir / f"{tag}.ncu-rep", SOURCE_EXPORT, keep=args.keep_reports)
            # The archive is renamed into place once closed: an interrupted run leaves no truncated .gz.
            with atomic_path(args.out_dir / f"{tag}.csv.gz") as tmp, gzip.open(tmp, "wt") as f:
                f.write(page)
            df = read_source_csv(page)
            df["cls"] = classify(df.executed, warp_tiles, k_tiles)
            rows += summarize(df, M=M, N=N, K=K, variant=name, config=cfg.tile_name)
            top = df.sort_values("samples", ascending=False).head(8)
            print(f"--- {tag}: the instructions with the most stall samples")
            print(top[["address", "cls", "sass", "samples", "executed"]].to_string(index=False))
    summary = pd.DataFrame(rows)
    write_result(summary, args.out_dir / "summary.csv", link="none", clocks="base (ncu --clock-control base)",
                 launches_per_variant=1)
    total = summary.groupby(["M", "N", "K", "variant"], sort=False).samples.sum()
    print(summary.to_string(index=False))
    print("stall samples per variant (all classes):")
    print(total.to_string())


if __name__ == "__main__":
    main()
