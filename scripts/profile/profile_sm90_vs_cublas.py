"""The Hopper GEMM against torch.matmul (cuBLAS) under Nsight Compute: where the two differ in
cycles, L2 traffic, pipe use and warp stalls on the LLM shapes where ours is slowest.

With ``--out`` the script runs ncu on itself (``--clock-control none``, sections :data:`SECTIONS`, only
the launches inside the NVTX range "profile") and writes the report's details page as a CSV with a
provenance sidecar. Without it, it is ncu's target: per shape, ours and torch.matmul are warmed up,
then launched once each inside the range.

    python3 scripts/profile/profile_sm90_vs_cublas.py --out sm90_ncu.csv
    python3 scripts/profile/profile_sm90_vs_cublas.py --out one.csv --shape 2048 4096 7168 128x256x64/row8

Ours runs the config given per shape (a label as ``sm90.config_label`` writes it), else what a plain
call runs on this machine (``sm90.config_for``, which may autotune first, outside the range).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis", "WarpStateStats", "LaunchStats")
# The shapes below 0.97 in the H200 record (data/h200/gemm_sm90_llm.csv, 02fa5b4) with its picks.
SHAPES = (
    (2048, 4096, 7168, "128x256x64/row8"),      # same tile and waves as cuBLAS's 256x128 coop kernel
    (1100, 1792, 5120, "128x128x64p/row1"),     # one wave; cuBLAS: 128x128 ping-pong, 6 stages, 2x1
    (1536, 3584, 18944, "128x256x64/row8+sk"),  # cuBLAS: 168x128 ping-pong
    (1536, 28672, 4096, "128x256x64/row8+sk"),  # cuBLAS: 176x128 ping-pong
    (2048, 7168, 5120, "128x176x64p/row8"),     # cuBLAS: 176x128 ping-pong
    (8192, 1280, 8192, "128x256x64/row4+sk"),   # cuBLAS: 320x128 coop
)


def parse_label(label: str):
    """The config ``sm90.config_label`` writes as ``label`` (``128x176x64c2p/row8+sk``; a raster is
    required), read by :func:`fo_lib.experiments.kernel_bench.config_variant`."""
    from fo_lib.experiments.kernel_bench import config_variant
    from fo_lib.gemm import sm90

    if "/" not in label:
        raise SystemExit(f"profile_sm90_vs_cublas: not a config label: {label!r} (e.g. 128x256x64/row8)")
    try:
        return config_variant(sm90.CONFIGS, label, 1)
    except KeyError:
        raise SystemExit(f"profile_sm90_vs_cublas: not a config label: {label!r} (e.g. 128x256x64/row8)") from None
    except ValueError as exc:  # a bad raster, or e.g. a stream-K tail on a cluster config
        what = "not a config label" if "row<N> or col<N>" in str(exc) else label
        raise SystemExit(f"profile_sm90_vs_cublas: {what}: {exc}") from None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", nargs=4, action="append", metavar=("M", "N", "K", "CONFIG"),
                   help="a shape and our config's label ('auto': what a plain call runs); repeatable")
    p.add_argument("--out", type=Path, help="run ncu on this script and write its details page here (CSV)")
    p.add_argument("--ncu", default="ncu")
    args = p.parse_args(argv)
    shapes = [(int(m), int(n), int(k), c) for m, n, k, c in args.shape] if args.shape else SHAPES
    for *_, label in shapes:
        if label != "auto":
            parse_label(label)  # a bad label stops here, before any ncu run
    if args.out:
        from fo_lib.provenance import write_result
        from fo_lib.reports.ncu import profile_and_export, read_details_csv

        profile = ["--clock-control", "none", "--nvtx", "--nvtx-include", "profile/"]
        profile += [a for sec in SECTIONS for a in ("--section", sec)]
        target = [sys.executable, __file__] + [a for sh in shapes for a in ("--shape", *map(str, sh))]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        page = profile_and_export(args.ncu, profile, target, args.out.with_suffix(".ncu-rep"),
                                  ("--csv", "--page", "details"))
        write_result(read_details_csv(page), args.out, link="none", clocks="none (ncu --clock-control none)",
                     shapes=[" ".join(map(str, sh)) for sh in shapes])
        print(f"ncu details of {len(shapes)} shapes (ours, then torch.matmul) -> {args.out}")
        return
    from fo_lib.gemm import sm90

    if not sm90.is_supported():
        sys.exit("profile_sm90_vs_cublas: needs a compute capability 9.0 GPU")
    for M, N, K, label in shapes:
        cfg = launch(M, N, K, label)
        print(f"profiled {M} x {N} x {K}: ours {sm90.config_label(cfg)}, then torch.matmul", file=sys.stderr,
              flush=True)


def launch(M: int, N: int, K: int, label: str, which=("ours", "cublas")):
    """Warm ours (``label``; "auto": what a plain call runs) and torch.matmul up on fresh ``M x N x K``
    operands, then launch those in ``which`` once each inside the NVTX range "profile"; returns our config."""
    import torch

    from fo_lib.gemm import sm90

    a = torch.randn(M, K, device="cuda").bfloat16()
    b = torch.randn(N, K, device="cuda").bfloat16()
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    cfg = sm90.config_for(a, b) if label == "auto" else parse_label(label)
    runs = {"ours": lambda: sm90.gemm_nt(a, b, c, config=cfg), "cublas": lambda: torch.matmul(a, b.T, out=c)}
    for _ in range(2):  # warm-up: module loads, a stream-K workspace, cuBLAS's heuristics
        for fn in runs.values():
            fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("profile")
    for name in which:
        runs[name]()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return cfg


if __name__ == "__main__":
    main()
