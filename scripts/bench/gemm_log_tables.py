"""The per-shape tables that ``scripts/bench/bench_gemm.py`` prints, read back from a ``gpu_run.sh`` log.

A GPU call's ``run.log`` holds, for every benchmark run of the call (the ``bench_gemm`` step and each
``exp_gemm`` option set), the table printed while it ran (read by :mod:`fo_lib.reports.gemm_log`).
This prints the signal's overhead per run: its median over the shapes and by K. It is how a run
whose CSVs did not come back is still read (``data/h200/runs/README.md``).

    python scripts/bench/gemm_log_tables.py data/h200/runs/<run>/run.log
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib.reports.gemm_log import read_log_tables  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("log", help="a gpu_run.sh run.log")
    args = p.parse_args(argv)
    with open(args.log) as f:
        df = read_log_tables(f.read())
    for (index, run), d in df.groupby(["index", "run"]):
        by_k = d.groupby("K")["signal_pct"].median()
        print(f"{index}: {run}: {len(d)} shapes, signal vs plain median {d['signal_pct'].median():+.2f} % "
              "(by K: " + ", ".join(f"{k} {v:+.2f}" for k, v in by_k.items()) + ")")


if __name__ == "__main__":
    sys.exit(main())
