"""Time of one explorer redraw (notebook 09): compute (tile grid, profile, tuning, the design space),
draw (matplotlib artists) and render (Agg + PNG), median of repeats, for views of T = 5 .. 12 waves
and one beyond the design space. Not a timed test: tests/test_explorer.py asserts the compute part.
With --measure (a CUDA GPU): the time of the measure control's round trip on the default view, first
(compiles and builds) and repeated, and for three shapes every partition measured against predicted
(rank correlation, chosen / best), written to --out (CSV + provenance sidecar).
    python scripts/bench/bench_explorer.py [--repeats 7] [--dpi 80]
    python scripts/bench/bench_explorer.py --measure --out data/<gpu>/explorer_measure.csv
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib.experiments import explorer as E  # noqa: E402

VIEWS = {"T=5": dict(M=2048), "T=10 (default)": dict(), "T=12": dict(M=5120), "T=19 (no design space)": dict(M=8192),
         "4090 PCIe (modelled)": dict(link="modelled 4090 pcie", tile="portable 128x256x32", M=4096, N=12288)}


# Shapes of 4 to 8 waves of 128 x 256 tiles on 128 CTAs, for the partition space.
SPACE_SHAPES = ((2048, 8192, 8192), (3072, 8192, 4096), (4096, 8192, 1024))


def measure(out: str, repeats: int, figure_dir: str | None = None) -> None:
    import pandas as pd

    from fo_lib.experiments.explorer import space
    from fo_lib.provenance import write_result

    m = E.Measurer()
    r = E.explore(E.resolve()[0])
    rows = []
    for i in range(repeats):
        t0 = time.perf_counter()
        got = m.measure(r)
        rows.append(dict(kind="round_trip", M=r.inp.M, N=r.inp.N, K=r.inp.K, run=i, reused=got.reused,
                         seconds=time.perf_counter() - t0, measured_ms=got.measured_ms, predicted_ms=got.predicted_ms,
                         view_predicted_ms=got.view_predicted_ms))
        print(f"measure round trip {i}: {rows[-1]['seconds']:.2f} s ({'reused' if got.reused else 'built'}); "
              + got.summary(), flush=True)
    for M, N, K in SPACE_SHAPES:
        t0 = time.perf_counter()
        try:
            s = space.summarize(space.measure_space(M, N, K))
        except ValueError as exc:  # more waves than the whole space is measured for, on this GPU
            print(f"skipped: {exc}", flush=True)
            continue
        rows.append(dict(kind="space", M=M, N=N, K=K, seconds=time.perf_counter() - t0, **s))
        print(f"{M} x {N} x {K}: {s['partitions']} partitions, rank correlation {s['spearman']:.3f}, chosen "
              f"{s['chosen']} / best {s['best']} = {s['chosen_over_best']:.3f}", flush=True)
    write_result(pd.DataFrame(rows), out, world_size=2, link="emulated (loopback, copy engine)", repeats=repeats)
    if figure_dir:  # the view the measure control draws (the last round trip), checked as every figure is
        from fo_lib.experiments.common import save
        from fo_lib.experiments.explorer.draw_measured import draw_measured
        os.environ["FO_FIGURE_CHECKS"] = "1"
        print("wrote", *save(draw_measured(got), "09_explorer_measured", figure_dir), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dpi", type=int, default=80, help="the widget's resolution")
    ap.add_argument("--measure", action="store_true", help="time the GPU measure round trip and the partition space")
    ap.add_argument("--out", help="with --measure: the CSV to write")
    ap.add_argument("--figure-dir", help="with --measure: also draw the measured view there (09_explorer_measured)")
    args = ap.parse_args()
    if args.measure:
        if not args.out:
            ap.error("--measure needs --out")
        measure(args.out, min(args.repeats, 4), args.figure_dir)
        return
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
