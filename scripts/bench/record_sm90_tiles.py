"""Record the Hopper GEMM's tile table on this GPU into the repository (``data/<gpu>/``) or a file:
the recorder of :mod:`fo_lib.calibration.sm90_tiles`, which ``python -m fo_lib calibrate`` also runs
(into the user's cache). Under a minute on an H100 or H200.

    python scripts/bench/record_sm90_tiles.py                   # -> data/<gpu>/gemm_sm90_tiles.csv
    python scripts/bench/record_sm90_tiles.py --out /tmp/tiles.csv --K 4096
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib.calibration import sm90_tiles  # noqa: E402
from fo_lib.gemm import sm90  # noqa: E402
from fo_lib.gemm.tile_table import TABLE_NAME  # noqa: E402
from fo_lib.provenance import DATA_DIR, gpu_tag  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help=f"CSV to write (default data/<gpu>/{TABLE_NAME})")
    p.add_argument("--K", type=int, nargs="*", default=list(sm90_tiles.KS))
    p.add_argument("--waves", type=int, default=sm90_tiles.WAVES, help="waves of the 128 x 256 tile per grid")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--inner", type=int, default=3, help="calls per CUDA graph")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not sm90.is_supported():
        sys.exit("record_sm90_tiles: needs a compute capability 9.0 GPU")
    out = args.out or DATA_DIR / gpu_tag() / TABLE_NAME
    df = sm90_tiles.record(out, args.K, waves=args.waves, rounds=args.rounds, inner=args.inner, seed=args.seed,
                           echo=lambda line: print(line, flush=True))
    # The spread between rasters: how much the raster choice is worth per tile.
    spread = df.groupby(["config", "M", "N", "K"]).ms_per_wave.agg(lambda s: s.max() / s.min() - 1)
    print(f"raster spread (slowest / fastest - 1) median {spread.median() * 100:.1f} %, max {spread.max() * 100:.1f} %"
          f" over {len(spread)} (config, grid, K); {len(df)} rows -> {out}")


if __name__ == "__main__":
    main()
