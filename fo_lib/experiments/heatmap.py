"""Fig. 13: speedup heat maps over M·N × K, and how close each cell comes to the theoretical bound.

Measured (GPU) by the overlap sweep itself (:func:`.overlap_measure.measure` over a grid of shapes
with three candidates each: the predicted partition, the finest, no overlap; every variant timed in
the same interleaved rounds), then reduced here (CPU, tested) to one row per cell:

* ``speedup`` = (cuBLAS then the collective) / (the tuned call), where the tuned call is the
  predicted partition overlapped if the tuner overlaps (the sweep's ``tuner_overlaps``: the model
  predicts a win over its no-overlap fallback), else the fallback itself (speedup 1, marked);
* ``bound_ms`` = :func:`theoretical_bound` of the predicted partition, and ``bound_ratio`` =
  ``bound_ms / tuned_call_ms`` = achieved speedup / theoretical speedup (both over the same baseline).

Recorded as ``data/<gpu>/heatmap.csv`` (+ ``heatmap_candidates.csv``, ``heatmap_profiles.json``:
the GEMM profiles and the link curve the bound is computed from), each with a provenance sidecar.
"""
from __future__ import annotations

import ast
import json

import numpy as np
import pandas as pd

from .recorded import NO_DATA, load_or_none, no_data_figure

NAME = "heatmap"
N_FIXED = 8192
M_FULL, K_FULL = (256, 512, 1024, 2048, 4096, 8192), (1024, 2048, 4096, 8192)
# Quick: 15 AllReduce cells, about 1-3 s each on an H200 (three candidates, no CUDA graphs).
M_QUICK, K_QUICK = (256, 1024, 2048, 4096, 8192), (1024, 4096, 8192)
PRIMITIVES_FULL, PRIMITIVES_QUICK = ("all_reduce", "reduce_scatter"), ("all_reduce",)
RATIO_LINE = 0.8
PAPER = {"statement": "> 80% of the theoretical bound in most cases, worse at small M·N",
         "setting": "RTX 4090 GEMM+RS TP=2, A800 GEMM+AR TP=4 (NCCL)"}


def shape_grid(quick: bool = False, n: int = N_FIXED) -> list[tuple[int, int, int]]:
    """The cells ``(M, N, K)``: M·N rows (N fixed, M from 256) by K columns."""
    ms, ks = (M_QUICK, K_QUICK) if quick else (M_FULL, K_FULL)
    return [(m, n, k) for m in ms for k in ks]


def theoretical_bound(gemm_ms: float, first_wave_ms: float, group_comm_ms) -> tuple[float, str]:
    """The paper's bound on one overlapped call, in ms, and which side decides it.

    ``gemm_ms``: the whole GEMM alone; ``first_wave_ms``: its first wave; ``group_comm_ms``: each
    group's collective alone, in group order. No schedule of these groups ends before the GEMM plus
    the last group's collective (``"compute"``: the GEMM dominates), nor before the first wave plus
    every group's collective back to back (``"comm"``: communication dominates); the bound is the
    larger of the two, the paper's formula for whichever side dominates.
    """
    comm = np.asarray(group_comm_ms, dtype=np.float64)
    if comm.ndim != 1 or comm.size == 0:
        raise ValueError(f"group_comm_ms must list at least one group's time, got {group_comm_ms!r}")
    if not (gemm_ms > 0 and 0 < first_wave_ms <= gemm_ms * (1 + 1e-9)) or np.any(comm < 0):
        raise ValueError(f"need 0 < first_wave_ms <= gemm_ms and comm >= 0, got gemm {gemm_ms}, "
                         f"first wave {first_wave_ms}, comm {group_comm_ms}")
    compute_side = float(gemm_ms + comm[-1])
    comm_side = float(first_wave_ms + comm.sum())
    return (compute_side, "compute") if compute_side >= comm_side else (comm_side, "comm")


def _parse(part) -> tuple[int, ...]:
    return tuple(int(x) for x in (ast.literal_eval(part) if isinstance(part, str) else part))


def group_bytes(wave_bytes, partition) -> list[int]:
    """Bytes each group of ``partition`` hands to its collective (its waves' output)."""
    ends = np.cumsum(_parse(partition))
    if ends[-1] != len(wave_bytes):
        raise ValueError(f"partition {partition} does not cover {len(wave_bytes)} waves")
    prefix = np.concatenate(([0], np.cumsum(np.asarray(wave_bytes, dtype=np.int64))))
    return [int(prefix[b] - prefix[a]) for a, b in zip(np.concatenate(([0], ends[:-1])), ends)]


def cell_rows(summary: pd.DataFrame, saved: dict) -> pd.DataFrame:
    """One row per cell from the sweep's summary rows and its saved profiles and curves.

    The bound's inputs, all measured in the same run: ``gemm_ms`` the faster of cuBLAS and our GEMM
    on every SM (the baseline's GEMM is cuBLAS, so the ideal must not pay our kernel's gap);
    ``first_wave_ms`` the profile's first wave (probe stamps on the plan's CTAs, scaled to the
    signaled GEMM's event time); per-group comm = the link curve (the collective alone, sampled
    in-process) at each group's bytes of the predicted partition.
    """
    from ..profiles import BandwidthCurve

    curves = {k: BandwidthCurve.from_dict(v) for k, v in saved["curves"].items()}
    profiles = {(p["primitive"], p["M"], p["N"], p["K"]): p for p in saved["profiles"]}
    rows = []
    for r in summary.itertuples(index=False):
        prof = profiles[(r.primitive, r.M, r.N, r.K)]
        part = _parse(r.predicted_partition)
        comm = [float(curves[r.primitive].latency_ms(b)) for b in group_bytes(prof["wave_bytes"], part)]
        gemm = float(min(r.cublas_ms, r.gemm_ms))
        bound, regime = theoretical_bound(gemm, min(float(prof["wave_ms"][0]), gemm), comm)
        overlaps = bool(r.tuner_overlaps)
        tuned = float(r.overlap_predicted_ms if overlaps else r.cublas_then_comm_ms)
        rows.append(dict(
            primitive=r.primitive, M=r.M, N=r.N, K=r.K, MN=r.M * r.N, world=r.world, link=r.link, waves=r.waves,
            config=r.config, gemm_ms=r.gemm_ms, cublas_ms=r.cublas_ms, comm_ms=r.comm_ms,
            cublas_then_comm_ms=r.cublas_then_comm_ms, predicted_partition=str(list(part)),
            overlap_predicted_ms=r.overlap_predicted_ms, best_partition=r.best_partition, best_ms=r.best_ms,
            tuner_overlaps=overlaps, check_keeps=bool(r.check_overlap_ms < r.check_reference_ms),
            tuned_call_ms=tuned, speedup=r.cublas_then_comm_ms / tuned,
            overlap_speedup=r.cublas_then_comm_ms / r.overlap_predicted_ms,
            bound_gemm_ms=gemm, first_wave_ms=float(prof["wave_ms"][0]), group_comm_ms=json.dumps(comm),
            bound_ms=bound, bound_regime=regime, bound_speedup=r.cublas_then_comm_ms / bound,
            bound_ratio=bound / tuned, model_params=r.model_params))
    return pd.DataFrame(rows)


# --- measuring (GPU) --------------------------------------------------------------------------------
def measure(comm=None, *, world: int = 2, quick: bool = False, primitives=None, shapes=None,
            rounds: int | None = None, inner: int | None = None, model_kw: dict | None = None,
            comm_sms: int | None = None):
    """The sweep over :func:`shape_grid` (three candidates per cell, eager calls only), reduced by
    :func:`cell_rows`. Returns ``(cells, candidates, saved)`` for :func:`record`."""
    from .overlap_measure import measure as sweep

    primitives = primitives or (PRIMITIVES_QUICK if quick else PRIMITIVES_FULL)
    summary, cands, saved = sweep(comm, world=world, primitives=primitives, shapes=shapes or shape_grid(quick),
                                  candidates_limit=3, graphs=False, comm_sms=comm_sms, model_kw=model_kw,
                                  rounds=rounds or (3 if quick else 5), inner=inner or (2 if quick else 3))
    return cell_rows(summary, saved), cands, saved


def record(cells, cands, saved, data_dir, *, world: int = 2, comm_sms: int = 4, **meta):
    """``<data_dir>/heatmap.csv``, ``heatmap_candidates.csv`` and ``heatmap_profiles.json``, each
    with its provenance sidecar."""
    from pathlib import Path

    from .common import check_record_folder
    from .overlap_measure import write_records

    if "quick" in meta:
        check_record_folder(data_dir, meta["quick"])
    link = cells.link.iloc[0] if len(cells) else "emulated"
    return write_records(cells, cands, saved, Path(data_dir) / f"{NAME}.csv", world=world, comm_sms=comm_sms,
                         link=link, **meta)


def run(mode: str = "auto", data_set: str = "h200", quick: bool = False, model_kw="auto") -> str:
    """Measure and record (GPU), or keep the recorded data set; returns the data set to load."""
    from ..provenance import DATA_DIR
    from .common import measured_set, resolve_mode
    from .recorded import model_params

    if resolve_mode(mode) != "measure":
        return data_set
    cells, cands, saved = measure(quick=quick, model_kw=model_params(model_kw) if isinstance(model_kw, str)
                                  else model_kw)
    tag = measured_set(quick)
    record(cells, cands, saved, DATA_DIR / tag)
    return tag


def load(data_set: str = "h200"):
    """``(cells, meta)``, or ``(None, {})`` when nothing was recorded yet."""
    return load_or_none(data_set, NAME)


# --- summary and figure (CPU) ----------------------------------------------------------------------
def summary(df: pd.DataFrame | None, meta: dict | None = None, others=()) -> pd.DataFrame:
    """The paper's statement beside ours, per primitive: the bound ratio over the cells with two or
    more waves (a one-wave GEMM has nothing to overlap: its bound is the sequential time), its
    median and minimum, the share at or above 80%, small against large M·N, and the fallbacks.
    ``df`` None (nothing recorded yet): the paper's row and one that says so. ``others``: ``(cells,
    meta)`` of other GPUs, their rows named by GPU (as :func:`plot` draws them)."""
    from .common import gpu_name

    rows = {f"paper ({PAPER['setting']})": {"bound ratio": PAPER["statement"]}}
    if df is None:
        rows["ours (emulated link)"] = {"bound ratio": NO_DATA}
    runs = [] if df is None else [(df, meta or {})] + [(d, m) for d, m in others if d is not None and not d.empty]
    groups = [(f" on {gpu_name(m)}" if len(runs) > 1 else "", prim, g)
              for d, m in runs for prim, g in d.groupby("primitive", sort=False)]
    for on, prim, g in groups:
        multi = g[g.waves > 1]
        small = multi.MN <= multi.MN.median()
        rows[f"ours: {prim}{on} (emulated link)"] = {
            "bound ratio": f"median {multi.bound_ratio.median():.2f}, min {multi.bound_ratio.min():.2f}",
            "cells >= 2 waves": len(multi), "share >= 0.8": round(float((multi.bound_ratio >= RATIO_LINE).mean()), 2),
            "median, small M·N": round(float(multi[small].bound_ratio.median()), 3),
            "median, large M·N": round(float(multi[~small].bound_ratio.median()), 3),
            "median speedup": round(float(g.speedup.median()), 3), "max speedup": round(float(g.speedup.max()), 3),
            "tuner falls back": int((~g.tuner_overlaps).sum()), "one-wave cells": int((g.waves == 1).sum()),
            "check would not keep": int((g.tuner_overlaps & ~g.check_keeps).sum())}
    return pd.DataFrame([v for v in rows.values()], index=list(rows), dtype=object).fillna("-")


def _panel(ax, g: pd.DataFrame, col: str, title: str, cmap: str, vmin: float, vmax: float):
    """One heat map of ``col`` over (M, K); every cell's value printed in black on a white box, so it
    reads on any colour and over the hatching of the fallback cells."""
    from matplotlib.patches import Rectangle

    ms, ks = sorted(g.M.unique()), sorted(g.K.unique())
    cell = g.set_index(["M", "K"])
    grid = np.full((len(ms), len(ks)), np.nan)
    for i, m in enumerate(ms):
        for j, k in enumerate(ks):
            if (m, k) in cell.index:
                grid[i, j] = cell.loc[(m, k), col]
    im = ax.imshow(grid, origin="lower", cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    for i, m in enumerate(ms):
        for j, k in enumerate(ks):
            if (m, k) not in cell.index:
                continue
            r = cell.loc[(m, k)]
            fallback = not bool(r.tuner_overlaps)
            text = f"{r[col]:.2f}" + ("\nfallback" if fallback else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color="k", style="italic" if fallback else "normal",
                    bbox=dict(boxstyle="round,pad=0.2", facecolor="white", alpha=0.85, lw=0))
            if fallback:  # hatched: the tuner runs cuBLAS then the collective here
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="0.6", lw=0))
    n = int(g.N.iloc[0])
    ax.set_xticks(range(len(ks)), [str(k) for k in ks])
    ax.set_yticks(range(len(ms)), [f"{m}x{n}\n{m * n / 2**20:.0f} Mi" for m in ms], fontsize=7)
    ax.set(xlabel="K", ylabel="M x N (elements)", title=title)
    return im


def plot(df: pd.DataFrame | None, meta: dict, others=()):
    """Per primitive: the speedup over cuBLAS then the collective, and the ratio to the bound;
    hatched cells are where the tuner falls back to no overlap. ``df`` None: the no-data figure.
    ``others``: ``(cells, meta)`` recorded on other GPUs, drawn below on the same colour scales, their
    panels named by GPU."""
    import matplotlib.pyplot as plt

    from .common import PRIMITIVE_TITLES, gpu_name, stamp

    if df is None or df.empty:
        fig = no_data_figure("Fig. 13 · speedup heat map (emulated link)",
                             "scripts/record/record_figures.py --only heatmap")
        stamp(fig, {"gpu": "no recorded data", "link": "emulated"} | meta, "emulated link")
        return fig
    runs = [(df, meta)] + [(d, m) for d, m in others if d is not None and not d.empty]
    rows = [(d, m, prim) for d, m in runs for prim in dict.fromkeys(d.primitive)]
    every = pd.concat([d for d, _ in runs])
    fig, axes = plt.subplots(len(rows), 2, figsize=(11, 3.6 * len(rows)), squeeze=False)
    hi = max(1.05, float(np.nanmax(every.speedup)))
    lo = min(1.0, float(np.floor(np.nanmin(every.speedup) * 100) / 100))  # a slower cell keeps its own colour
    # The bound is built from parts timed alone, so a call can beat it by a few percent: the scale
    # reaches the largest share instead of stopping at 1, and a line on the colour bar marks 1.
    top = max(1.0, float(np.ceil(np.nanmax(every.bound_ratio) * 20) / 20))
    for row, (d, m, prim) in zip(axes, rows):
        g = d[d.primitive == prim]
        # Several GPUs: the GPU heads each title, on a line of its own (a title's width is a panel's).
        name = PRIMITIVE_TITLES.get(prim, prim) + (f" on {gpu_name(m)}:\n" if len(runs) > 1 else ": ")
        im = _panel(row[0], g, "speedup", f"{name}speedup over cuBLAS then the collective", "viridis", lo, hi)
        fig.colorbar(im, ax=row[0], fraction=0.046, label="speedup")
        im = _panel(row[1], g, "bound_ratio", f"{name}share of the theoretical speedup reached", "RdYlGn", 0.5, top)
        cbar = fig.colorbar(im, ax=row[1], fraction=0.046, label="share of the bound (> 1: beats it)")
        cbar.ax.axhline(1.0, color="k", lw=1)
    fig.tight_layout()
    world = meta.get("world_size", "?")
    stamp(fig, meta, f"emulated link, W = {world} virtual ranks")
    return fig
