"""Where the portable GEMM's epilogue variants spend their cycles, instruction by instruction.

For each shape and variant, one launch is profiled by ``ncu --section SourceCounters`` (base clocks)
and its per-instruction table (SASS, executed instructions, warp stall samples) is exported with
``ncu --page source --csv --print-source sass``. The summary sums the stall samples per region of
the kernel: the main loop (from the first to the last HMMA), and the rest (prologue, the
once-per-tile code, the epilogue). Comparing the plain kernel with a signal kernel on one shape
shows where the signal's extra time goes (docs/perf-log.md, session 9).

    python scripts/profile_stall_sites.py --out-dir stalls/          # runs ncu on itself
"""
from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profile_signal_cost import EPILOGUE_OF, launch, parse_shape  # noqa: E402

DEFAULT_VARIANTS = ("plain", "signal_rows", "signal_tiles", "signal_rows_no_group")
DEFAULT_SHAPES = ("8192x8192x1024", "8192x8192x8192")


def read_source_csv(text: str):
    """ncu's source page (CSV) -> DataFrame with ``address``, ``sass``, ``samples``,
    ``samples_not_issued``, ``executed`` (ncu's own lines before the table are skipped)."""
    import pandas as pd

    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith('"Address"') or line.startswith("Address")),
                 None)
    if first is None:
        raise ValueError("no source table in ncu's output")
    t = pd.read_csv(io.StringIO("\n".join(lines[first:])))

    def col(*words):
        for c in t.columns:
            if all(w.lower() in c.lower() for w in words):
                return c
        return None

    def num(c):
        return pd.to_numeric(t[c].astype(str).str.replace(",", ""), errors="coerce").fillna(0) if c else 0

    return pd.DataFrame({
        "address": t[col("Address")],
        "sass": t[col("Source")].astype(str),
        "samples": num(col("Warp Stall Sampling", "All")),
        "samples_not_issued": num(col("Warp Stall Sampling", "Not")),
        "executed": num(col("Instructions Executed")) if col("Instructions Executed") is not None else 0,
    })


def regions(df):
    """Label each instruction: ``loop`` (first to last HMMA) or ``other``."""
    hmma = df.index[df.sass.str.contains("HMMA")]
    lo, hi = (hmma.min(), hmma.max()) if len(hmma) else (0, -1)
    return ["loop" if lo <= i <= hi else "other" for i in range(len(df))]


def opcode(sass: str) -> str:
    m = re.match(r"\s*(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", sass)
    return m.group(1) if m else "?"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, help="where the per-instruction CSVs and summary go")
    p.add_argument("--shapes", type=parse_shape, nargs="*", default=[parse_shape(s) for s in DEFAULT_SHAPES])
    p.add_argument("--variants", nargs="*", default=list(DEFAULT_VARIANTS), choices=list(EPILOGUE_OF))
    p.add_argument("--ncu", default="ncu")
    p.add_argument("--launch", action="store_true", help=argparse.SUPPRESS)  # ncu's target
    args = p.parse_args(argv)
    if args.launch:
        launch(args.shapes, 1, args.variants)
        return
    if not args.out_dir:
        p.error("--out-dir is required")
    import pandas as pd

    args.out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for M, N, K in args.shapes:
        for name in args.variants:
            tag = f"{M}x{N}x{K}_{name}"
            rep = args.out_dir / f"{tag}.ncu-rep"
            cmd = [args.ncu, "--clock-control", "base", "--section", "SourceCounters", "--section", "WarpStateStats",
                   "-k", f"regex:fo_gemm_nt_.*_{EPILOGUE_OF[name]}$", "--launch-count", "1", "-f", "-o", str(rep),
                   sys.executable, __file__, "--launch", "--shapes", f"{M}x{N}x{K}", "--variants", name]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"ncu failed for {tag} ({done.returncode}):\n{done.stderr[-2000:]}\n{done.stdout[-2000:]}")
                continue
            exp = subprocess.run([args.ncu, "-i", str(rep), "--page", "source", "--csv", "--print-source", "sass"],
                                 capture_output=True, text=True, check=False)
            (args.out_dir / f"{tag}.csv").write_text(exp.stdout)
            try:
                df = read_source_csv(exp.stdout)
            except (ValueError, KeyError) as e:
                print(f"{tag}: could not read the source table ({e}); stderr: {exp.stderr[-1000:]}")
                print(exp.stdout[:1500])
                continue
            df["region"] = regions(df)
            df["opcode"] = df.sass.map(opcode)
            for region, g in df.groupby("region"):
                rows.append(dict(M=M, N=N, K=K, variant=name, region=region, samples=g.samples.sum(),
                                 not_issued=g.samples_not_issued.sum(), executed=g.executed.sum(),
                                 instructions=len(g)))
            top = df.sort_values("samples", ascending=False).head(12)
            print(f"--- {tag}: top instructions by stall samples")
            print(top[["address", "region", "sass", "samples", "samples_not_issued", "executed"]].to_string(index=False))
    if rows:
        summary = pd.DataFrame(rows)
        summary.to_csv(args.out_dir / "summary.csv", index=False)
        print(summary.to_string(index=False))


if __name__ == "__main__":
    main()
