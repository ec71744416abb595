"""Measure Fig. 13 (speedup heat map) and Fig. 14 (ablation) on one GPU over the emulated link and
record them with provenance: heatmap.csv (+ _candidates.csv, _profiles.json) and ablation.csv.

    python scripts/record/record_figures.py --quick --only heatmap,ablation --out-dir data/h200-quick
    FO_STEPS=heatmap,ablation scripts/gpu_run.sh          # the same, into $OUT/data/

Each figure is written as soon as it is measured, so a later one that fails or times out keeps the
earlier record. ``--out-dir`` defaults to data/<gpu>[-quick]/ (notebooks 10 and 11 replay
data/<data_set>/); a --quick record only goes into a folder named *-quick, a full one never does.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

FIGURES = ("heatmap", "ablation")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the small grids (about 1-2 minutes each on an H200)")
    ap.add_argument("--only", default=",".join(FIGURES), help=f"comma-separated subset of {FIGURES}")
    ap.add_argument("--out-dir", default=None, help="default: data/<gpu>[-quick]/")
    ap.add_argument("--world", type=int, default=2, help="virtual ranks of the loopback link")
    ap.add_argument("--model-params", default="auto",
                    help="the refined model's parameters: 'auto' (this GPU's, fo_lib.store.model_params: "
                         "python -m fo_lib calibrate's fit or data/<gpu>/overlap_calibration.csv), "
                         "'none' (defaults) or a JSON file")
    args = ap.parse_args(argv)
    only = [f.strip() for f in args.only.split(",") if f.strip()]
    unknown = set(only) - set(FIGURES)
    if unknown:
        ap.error(f"unknown figure(s) {sorted(unknown)}; choose from {FIGURES}")

    from fo_lib.experiments.common import check_record_folder, measured_set
    from fo_lib.provenance import DATA_DIR

    out = Path(args.out_dir) if args.out_dir else DATA_DIR / measured_set(args.quick)
    try:  # before measuring: minutes of GPU time are not spent on a record that may not land there
        check_record_folder(out, args.quick)
    except ValueError as exc:
        print(f"record_figures.py: error: {exc}", file=sys.stderr)
        sys.exit(2)

    from fo_lib.comm.loopback import LoopbackCommunicator
    from fo_lib.experiments import ablation, heatmap
    from fo_lib.experiments.recorded import model_params

    model_kw = model_params(args.model_params)
    comm = LoopbackCommunicator(args.world)
    meta = dict(comm_sms=int(comm.sm_footprint), model_params_source=args.model_params, quick=args.quick)
    for name in only:
        t0 = time.perf_counter()
        if name == "heatmap":
            cells, cands, saved = heatmap.measure(comm, quick=args.quick, model_kw=model_kw)
            path = heatmap.record(cells, cands, saved, out, world=args.world, **meta)
            print(heatmap.summary(cells).to_string(), flush=True)
        else:
            df = ablation.measure(comm, quick=args.quick, model_kw=model_kw)
            path = ablation.record(df, out, **meta)
            print(ablation.summary(df).to_string(), flush=True)
        print(f"wrote {path} in {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
