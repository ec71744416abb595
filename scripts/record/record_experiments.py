"""Measure the notebook experiments that have their own measurement function (GPU) and record
them under data/<gpu>/ with provenance: currently the wave pattern (notebook 01).

    python scripts/record/record_experiments.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib import experiments as ex  # noqa: E402
from fo_lib.experiments import wave_pattern  # noqa: E402


def main() -> None:
    df = wave_pattern.measure()
    path = ex.record(df, wave_pattern.NAME, link="none")
    print(wave_pattern.detect_waves(df).groupby(["config", "swizzle"])[["waves", "agreement", "spread_over_wave"]].mean())
    print("wrote", path)


if __name__ == "__main__":
    main()
