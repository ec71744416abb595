"""Where the portable GEMM's epilogue variants spend their cycles, instruction by instruction.

For each shape and variant, one launch is profiled by ``ncu --section SourceCounters`` (base clocks)
and its per-instruction table (SASS, executed count, warp stall samples by reason) is exported with
``ncu --page source --csv --print-source sass``. Each instruction is put in a class by how often a
warp executes it per tile it computes:

* ``k-tile``: about once per k-tile (the main loop's hot path);
* ``tile``: about once per tile (the top of a tile, the load cursor's move, the epilogue);
* ``rare``: less than once per tile (the release, done by one thread; the kernel's start and end);
* ``never``: not executed (stall samples still land there, e.g. on a branch's target).

The summary (``summary.csv`` with its provenance sidecar) sums the stall samples and executed
instructions per class, and per stall reason, for every variant; the difference between the plain
kernel and a signal kernel on one shape says where the signal's extra time goes (docs/perf-log.md,
session 9). The per-instruction tables are kept as ``<M>x<N>x<K>_<variant>.csv.gz``.

    python scripts/profile_stall_sites.py --out-dir stalls/          # runs ncu on itself
"""
from __future__ import annotations

import argparse
import gzip
import io
import math
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profile_signal_cost import KERNEL_OF, launch, ncu_number, parse_shape  # noqa: E402

DEFAULT_VARIANTS = ("plain", "signal_rows", "signal_tiles", "signal_rows_no_group")
DEFAULT_SHAPES = ("8192x8192x1024", "8192x8192x8192")
# The stall reasons kept in the summary (ncu's source-page columns, "stall_<reason>").
REASONS = ("barrier", "long_sb", "short_sb", "wait", "mio", "math", "lg", "membar", "branch_resolving",
           "dispatch", "no_inst", "not_selected", "selected")


def _number(col):
    return col.map(lambda v: ncu_number(v, blank=0.0))


def read_source_csv(text: str):
    """ncu's source page (CSV) -> DataFrame with ``address``, ``sass``, ``samples``,
    ``samples_not_issued``, ``executed`` and one ``stall_<reason>`` column per reason ncu reports
    (all samples, not the "Not Issued" ones). ncu's own lines before the table are skipped."""
    import pandas as pd

    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if first is None:
        raise ValueError("no source table in ncu's output")
    t = pd.read_csv(io.StringIO("\n".join(lines[first:])))
    need = {"Address", "Source", "Warp Stall Sampling (All Samples)",
            "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed"}
    if not need <= set(t.columns):
        raise ValueError(f"ncu's source table lacks {sorted(need - set(t.columns))}")
    out = pd.DataFrame({
        "address": t["Address"].astype(str),
        "sass": t["Source"].astype(str).str.strip(),
        "samples": _number(t["Warp Stall Sampling (All Samples)"]),
        "samples_not_issued": _number(t["Warp Stall Sampling (Not-issued Samples)"]),
        "executed": _number(t["Instructions Executed"]),
    })
    for c in t.columns:
        if c.startswith("stall_") and "Not Issued" not in c:
            out[c] = _number(t[c])
    return out


def classify(executed, warp_tiles: int, k_tiles: int) -> list[str]:
    """The class of each instruction from its executed count (warp instructions over the launch):
    ``warp_tiles`` = tiles x warps per CTA, ``k_tiles`` per tile (see the module docstring)."""
    out = []
    for e in executed:
        per_tile = e / warp_tiles
        if e == 0:
            out.append("never")
        elif k_tiles > 3 and per_tile >= k_tiles - 3:
            out.append("k-tile")
        elif per_tile >= 0.5:
            out.append("tile")
        else:
            out.append("rare")
    return out


def summarize(df, **labels):
    """One row per class: samples, executed instructions, static instructions, samples per reason."""
    rows = []
    for cls, g in df.groupby("cls"):
        row = dict(labels, cls=cls, samples=int(g.samples.sum()), not_issued=int(g.samples_not_issued.sum()),
                   executed=int(g.executed.sum()), instructions=len(g))
        for r in REASONS:
            row[r] = int(g[f"stall_{r}"].sum()) if f"stall_{r}" in g else 0
        rows.append(row)
    return rows


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
            rep = args.out_dir / f"{tag}.ncu-rep"
            cmd = [args.ncu, "--clock-control", "base", "--section", "SourceCounters", "--section", "WarpStateStats",
                   "-k", f"regex:fo_gemm_nt_.*_{KERNEL_OF[name]}$", "--launch-count", "1", "-f", "-o", str(rep),
                   sys.executable, __file__, "--launch", "--shapes", f"{M}x{N}x{K}", "--variants", name]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"ncu failed for {tag} ({done.returncode}):\n{done.stderr[-2000:]}\n"
                                 f"{done.stdout[-2000:]}")
            exp = subprocess.run([args.ncu, "-i", str(rep), "--page", "source", "--csv", "--print-source", "sass"],
                                 capture_output=True, text=True, check=False)
            if exp.returncode != 0:
                raise SystemExit(f"ncu could not export {rep} ({exp.returncode}):\n{exp.stderr[-2000:]}")
            with gzip.open(args.out_dir / f"{tag}.csv.gz", "wt") as f:
                f.write(exp.stdout)
            if not args.keep_reports:
                rep.unlink()
            df = read_source_csv(exp.stdout)
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
