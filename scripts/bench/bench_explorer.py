"""Time of one explorer redraw (notebook 09): compute (tile grid, profile, tuning, the design space),
draw (matplotlib artists) and render (Agg + PNG), median of repeats, for views of T = 5 .. 12 waves
and one beyond the design space. Not a timed test: tests/test_explorer.py asserts the compute part.
    python scripts/bench/bench_explorer.py [--repeats 7] [--dpi 80]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib.experiments import explorer as E  # noqa: E402

VIEWS = {"T=5": dict(M=2048), "T=10 (default)": dict(), "T=12": dict(M=5120), "T=19 (no design space)": dict(M=8192),
         "4090 PCIe (modelled)": dict(link="modelled 4090 pcie", tile="portable 128x256x32", M=4096, N=12288)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dpi", type=int, default=80, help="the widget's resolution")
    args = ap.parse_args()
    fig = E.new_figure()
    E.redraw(fig, dpi=args.dpi)  # warm-up: fonts, caches
    print(f"{'view':26s} {'T':>3s} {'compute ms':>11s} {'draw+png ms':>12s} {'total ms':>9s}")
    for name, view in VIEWS.items():
        runs = []
        for i in range(args.repeats):
            # Alternate the comm SM count so that no step can answer from a cache of the last view.
            r, _, t = E.redraw(fig, dpi=args.dpi, **view, comm_sms=E.resolve(**view)[0].comm_sms - (i % 2))
            runs.append(t)
        med = {k: 1e3 * statistics.median(x[k] for x in runs) for k in ("compute_s", "draw_s", "total_s")}
        print(f"{name:26s} {r.num_waves:3d} {med['compute_s']:11.1f} {med['draw_s']:12.1f} {med['total_s']:9.1f}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.1f} s)")
