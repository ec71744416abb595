"""Where a persistent GEMM's time goes, CTA by CTA: the probe epilogue's per-tile stamps cut into the
CTAs' start skew, their steady cadence of units, and the tail after the last unit starts.

The question it answers: is a GEMM that runs behind cuBLAS slower per unit of work (every unit
takes longer: the main loop) or slower at its ends (the first unit's pipeline fill, the last
unit's epilogue, CTAs that start late)? ``kernel_ms - units * cadence`` is the part the ends cost.

Pure: numpy only (:func:`summarize` takes the probe's ``[tiles, 4]`` stamps as an array).
"""
from __future__ import annotations

import numpy as np

# Columns of the probe (fo_lib.gemm.family.GemmFamily.gemm_nt_probe).
START, END, SMID, CTA = range(4)


def summarize(probe: np.ndarray, kernel_ms: float) -> dict:
    """One launch's stamps (``[tiles, 4]``: start ns, end ns, smid, CTA) and ``kernel_ms``, the same
    kernel's time from events (typically a median over replays without the probe, so the parts
    below that subtract from it are estimates and may come out slightly negative): a dict of
    microseconds.

    * ``span_us``: first start to last end over every CTA; ``ends_us = kernel - span``: what the
      stamps do not cover (launch, prologue up to the first main loop, the last stores' drain).
    * ``skew_us``: the latest CTA's first start after the earliest's.
    * ``cadence_us``: per CTA, the time from its first unit's start to its last unit's over the units
      between (the steady time per unit); the median over CTAs with at least two units.
    * ``units``: the most units a CTA runs; ``steady_us = units * cadence``, the time the longest CTA
      would take at the steady cadence, and ``overhead_us = kernel - steady``.
    * ``last_unit_us``: the median over CTAs of their last unit's start to end (its main loop and
      epilogue); ``imbalance_us``: the last end after the median CTA's last end.
    """
    p = np.asarray(probe, dtype=np.int64)
    if p.ndim != 2 or p.shape[1] != 4 or len(p) == 0:
        raise ValueError(f"probe stamps must be [tiles, 4] with tiles >= 1, got shape {p.shape}")
    if (p[:, END] < p[:, START]).any() or (p[:, START] <= 0).any():
        raise ValueError("probe stamps with an end before its start or an unset start (a tile not run?)")
    t0 = p[:, START].min()
    kernel_us = 1e3 * kernel_ms
    cadence, firsts, last_units, last_ends, units = [], [], [], [], 0
    for cta in np.unique(p[:, CTA]):
        rows = p[p[:, CTA] == cta]
        rows = rows[np.argsort(rows[:, START])]
        units = max(units, len(rows))
        firsts.append(rows[0, START] - t0)
        last_units.append(rows[-1, END] - rows[-1, START])
        last_ends.append(rows[:, END].max() - t0)
        if len(rows) >= 2:
            cadence.append((rows[-1, START] - rows[0, START]) / (len(rows) - 1))
    span_us = (p[:, END].max() - t0) / 1e3
    cadence_us = float(np.median(cadence)) / 1e3 if cadence else float("nan")
    steady_us = units * cadence_us
    return dict(kernel_us=kernel_us, span_us=span_us, ends_us=kernel_us - span_us,
                skew_us=float(max(firsts)) / 1e3, units=units, cadence_us=cadence_us,
                steady_us=steady_us, overhead_us=kernel_us - steady_us,
                last_unit_us=float(np.median(last_units)) / 1e3,
                imbalance_us=(float(max(last_ends)) - float(np.median(last_ends))) / 1e3)
