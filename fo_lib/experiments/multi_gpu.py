"""Multi-GPU NCCL measurements (``scripts/bench/bench_nccl.py`` under torchrun): link curves, the SMs NCCL
takes from a GEMM, and the speedup sweep with the tuner's choice of partition, fallback and NCCL CTA
budget. Recorded in ``data/h200x<W>/``; measured again when 2+ GPUs are visible (``mode="auto"``).
"""
from __future__ import annotations

import subprocess
import sys

import pandas as pd

from .common import load
from ..provenance import DATA_DIR, REPO_ROOT

PAPER = {"speedup_a800_nvlink": 1.30, "speedup_4090_pcie": 1.65}


def data_sets() -> list[str]:
    """Recorded full multi-GPU data sets, largest world first (``h200x8`` before ``h200x2``; the
    ``-quick`` sets of ``run_all.sh --quick`` are left out)."""
    found = [p.name for p in DATA_DIR.glob("*x[0-9]") if (p / "overlap_nccl.csv").exists()]
    found += [p.name for p in DATA_DIR.glob("*x[0-9][0-9]") if (p / "overlap_nccl.csv").exists()]
    return sorted(found, key=lambda n: -int(n.rsplit("x", 1)[1]))


def gpu_count() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def run(mode: str = "auto", data_set: str | None = None, quick: bool = False) -> str:
    """Measure with every visible GPU (``torchrun scripts/bench/bench_nccl.py``) when asked and possible,
    else keep the recorded data; returns the data set to load."""
    from .common import resolve_mode

    gpus = gpu_count()
    if resolve_mode(mode, available=lambda: gpus >= 2, need=f"2+ GPUs for NCCL (found {gpus})") == "measure":
        from .common import measured_set
        data_set = measured_set(quick, world=gpus)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus),
               str(REPO_ROOT / "scripts" / "bench" / "bench_nccl.py"), "--out", str(DATA_DIR / data_set)]
        subprocess.run(cmd + (["--quick"] if quick else []), check=True, cwd=REPO_ROOT,
                       env={**__import__("os").environ, "NCCL_NVLS_ENABLE": "0"})
        return data_set
    if data_set is None:
        sets = data_sets()
        if not sets:
            raise FileNotFoundError("no recorded multi-GPU data (data/<gpu>x<W>/overlap_nccl.csv)")
        data_set = sets[0]
    return data_set


def curves(data_set: str):
    return load(data_set, "nccl_curves")


def footprint(data_set: str):
    return load(data_set, "nccl_footprint")


def sweep(data_set: str):
    return load(data_set, "overlap_nccl")


def sweep_both_layouts(data_set: str) -> pd.DataFrame:
    """The sweep plus, where it was recorded (``data/<set>/rows_layout/``, ``bench_nccl.py --layout
    rows``), the AllReduce sweep in the rows layout, with a ``layout`` column: what
    :func:`tuner_pick` needs to let the checked tuner choose the layout too."""
    df, _ = sweep(data_set)  # records without a layout column are tiles (tuner_pick fills it)
    if (DATA_DIR / data_set / "rows_layout" / "overlap_nccl.csv").exists():
        rows, _ = load(f"{data_set}/rows_layout", "overlap_nccl")
        # Only AllReduce has a rows layout: other primitives of that run are a second tiles sweep.
        df = pd.concat([df, rows[rows.primitive == "all_reduce"].assign(layout="rows")], ignore_index=True)
    return df


COPY_ENGINE = "copy_engine"  # sub-folder of a data set: the sweep of bench_nccl.py --copy-engine


def on_copy_engine(summary: pd.DataFrame) -> pd.Series:
    """Which rows of a sweep ran on the copy-engine communicator (false in records made before the
    ``copy_engine`` column existed, or where it is missing)."""
    if "copy_engine" not in summary:
        return pd.Series(False, index=summary.index)
    return summary.copy_engine.fillna(False).astype(bool)


def copy_engine_sweep(data_set: str):
    """The AllReduce sweep of ``bench_nccl.py --copy-engine`` recorded in ``data/<set>/copy_engine/``
    (NCCL's default communicator and the copy-engine one, measured in the same call), as
    ``(summary, meta)``; None where it was not recorded."""
    if not (DATA_DIR / data_set / COPY_ENGINE / "overlap_nccl.csv").exists():
        return None
    return load(f"{data_set}/{COPY_ENGINE}", "overlap_nccl")


def copy_engine_comparison(summary: pd.DataFrame) -> pd.DataFrame:
    """Per AllReduce shape of a copy-engine record: the predicted partition replayed as one CUDA
    graph on NCCL's kernels (``nccl_graph_speedup``) and on the copy engines with the sum in the
    post-reorder (``copy_engine_graph_speedup``), each over cuBLAS then NCCL's default AllReduce
    measured in the same rounds (``nccl_reference_ms``, ``copy_engine_reference_ms``), and the share
    of the GEMM time that communication takes."""
    ar = summary[summary.primitive == "all_reduce"].assign(reference_ms=reference_ms(summary))
    rows = []
    for (M, N, K), g in ar.groupby(["M", "N", "K"], sort=False):
        on_ce = on_copy_engine(g)
        ce, nccl = g[on_ce], g[~on_ce & (g.nccl_max_ctas == 0)]
        if ce.empty or nccl.empty:
            continue
        n_ref, c_ref = float(nccl.reference_ms.iloc[0]), float(ce.reference_ms.iloc[0])
        n_ms, c_ms = float(nccl.overlap_predicted_graph_ms.iloc[0]), float(ce.overlap_predicted_graph_ms.iloc[0])
        rows.append(dict(M=M, N=N, K=K, comm_over_cublas=float(nccl.comm_over_cublas.iloc[0]),
                         nccl_reference_ms=n_ref, copy_engine_reference_ms=c_ref, nccl_graph_ms=n_ms,
                         copy_engine_graph_ms=c_ms, nccl_graph_speedup=n_ref / n_ms,
                         copy_engine_graph_speedup=c_ref / c_ms))
    return pd.DataFrame(rows)


def reference_ms(summary: pd.DataFrame) -> pd.Series:
    """The non-overlapped baseline per row: cuBLAS then the collective on the whole output, measured
    back to back (``cublas_then_comm_ms``), or, in records made before that variant existed, the sum
    of the two medians measured in the same rounds. (``sequential_ms`` is our semantics-preserving
    baseline with row bookkeeping; on recorded data it also carried avoidable host syncs.)"""
    if "cublas_then_comm_ms" in summary:
        return summary.cublas_then_comm_ms
    return summary.cublas_ms + summary.comm_ms


def tuner_pick(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (primitive, shape): the run the tuner would make without measuring candidates. Among the
    NCCL CTA budgets it takes the one whose predicted time (best partition, or the sequential
    fallback) is lowest; then it runs the predicted partition (eager, or replayed as one CUDA graph)
    or, where the model says no partition wins, the baseline. The reference is the cuBLAS-then-NCCL
    time measured in the same rounds as the chosen row where that row's baseline ran on NCCL's
    default communicator (NCCL's own CTA budget, or the copy-engine sweep, whose baselines use the
    default communicator); for a row of a bounded CTA budget, whose baseline ran on that budget's
    slower NCCL, the reference of the same layout's NCCL-default row (the fastest default-NCCL
    reference of the shape where there is none).

    ``tuned_checked``: the same choice, kept only if it also wins one short timing of itself
    against cuBLAS then NCCL (``check_*_ms``: separate rounds, so the reported times are not the
    ones the decision saw), else the fallback; records without that check have NaN there.

    A summary with a ``layout`` column holding both AllReduce layouts (two sweeps of
    ``scripts/bench/bench_nccl.py --layout``) gives one row per shape: the eager and graph choices are
    the ``tiles`` layout's (the default), and the checked tuner also picks the layout, the one whose
    choice has the shorter check timing (``checked_layout``)."""
    if "nccl_max_ctas" not in summary:
        summary = summary.assign(nccl_max_ctas=0)
    summary = summary.assign(reference_ms=reference_ms(summary),
                             predicted_choice_ms=summary[["predicted_model_ms", "predicted_sequential_ms"]].min(axis=1))
    summary["layout"] = summary["layout"].fillna("tiles") if "layout" in summary else "tiles"
    if "overlap_predicted_graph_ms" not in summary:
        summary["overlap_predicted_graph_ms"] = float("nan")
    checked = "check_overlap_ms" in summary
    rows = []
    for _, shape in summary.groupby(["primitive", "M", "N", "K"], sort=False):
        default_comm = shape[shape.nccl_max_ctas == 0]
        # One choice per layout: the budget with the lowest predicted time.
        picks = {lay: g.loc[g.predicted_choice_ms.idxmin()] for lay, g in shape.groupby("layout", sort=False)}
        row = picks.get("tiles", next(iter(picks.values()))).copy()
        if row.nccl_max_ctas == 0 or default_comm.empty:
            ref = row.reference_ms
        else:
            same = default_comm[~on_copy_engine(default_comm) & (default_comm.layout == row.layout)]
            ref = same.reference_ms.iloc[0] if len(same) else default_comm.reference_ms.min()
        row["reference_ms"] = ref
        row["tuned_eager_ms"] = row.overlap_predicted_ms if row.tuner_overlaps else ref
        graph = row.overlap_predicted_graph_ms
        row["tuned_graph_ms"] = graph if (row.tuner_overlaps and graph == graph) else ref
        if checked:
            live = [p for p in picks.values() if p.tuner_overlaps and p.check_overlap_ms == p.check_overlap_ms]
            best = min(live, key=lambda p: p.check_overlap_ms) if live else None
            keep = bool(best is not None and best.check_overlap_ms < shape.check_reference_ms.min())
            row["tuner_keeps_overlap"] = keep
            row["checked_layout"] = best.layout if keep else ""
            best_graph = best.overlap_predicted_graph_ms if keep else float("nan")
            row["tuned_checked_ms"] = best_graph if best_graph == best_graph else ref
        else:
            row["tuner_keeps_overlap"], row["checked_layout"], row["tuned_checked_ms"] = False, "", float("nan")
        for name in ("tuned_eager", "tuned_graph", "tuned_checked"):
            row[f"{name}_speedup"] = ref / row[f"{name}_ms"]
        row["best_eager_speedup"] = ref / shape.best_ms.min()
        row["decomposition_speedup"] = ref / shape[["decomp2_ms", "decomp4_ms"]].min(axis=None)
        row["symm_mem_speedup"] = ref / shape.symm_mem_fused_ms.min()
        rows.append(row)
    return pd.DataFrame(rows).reset_index(drop=True)


def time_breakdown(data_set: str) -> pd.DataFrame:
    """Where the best whole-call graph of each (primitive, shape, NCCL CTA budget) spends its time,
    against cuBLAS then NCCL (``reference_ms``) and the overlap bound ``max(cuBLAS, comm)``:

    ``best_graph_ms = cublas_ms + gemm_gap_ms + sm_share_ms + exposed_ms``, where ``gemm_gap_ms`` is
    our GEMM on every SM minus cuBLAS, ``sm_share_ms`` what the GEMM loses on the SMs it leaves to
    NCCL (its profiled waves on ``ctas`` CTAs minus its time on all SMs), and ``exposed_ms`` the rest:
    communication that does not hide behind the GEMM (at least the last group's), the waits and the
    post-reorder. (The profile times the GEMM on all SMs once, so on short GEMMs ``gemm_gap_ms`` and
    ``sm_share_ms`` carry its noise in opposite directions.)"""
    from ..provenance import DATA_DIR
    from .overlap import budget_key, profiles_and_curves

    summary, _ = sweep(data_set)
    if "best_graph_ms" not in summary:
        raise ValueError(f"{data_set}: this record has no CUDA-graph candidate times (best_graph_ms)")
    profiles, _ = profiles_and_curves(DATA_DIR / data_set, "overlap_nccl")
    rows = []
    for r in summary.assign(reference_ms=reference_ms(summary)).itertuples():
        prof = profiles.get((budget_key(r), r.primitive, r.M, r.N, r.K))
        if prof is None or r.best_graph_ms != r.best_graph_ms:
            continue
        reduced = float(sum(prof.wave_ms))
        rows.append(dict(primitive=r.primitive, M=r.M, N=r.N, K=r.K, nccl_max_ctas=r.nccl_max_ctas,
                         comm_sms=prof.comm_sms, comm_over_cublas=r.comm_ms / r.cublas_ms,
                         reference_ms=r.reference_ms, bound_ms=max(r.cublas_ms, r.comm_ms),
                         best_graph_ms=r.best_graph_ms, cublas_ms=r.cublas_ms,
                         gemm_gap_ms=prof.full_ms - r.cublas_ms, sm_share_ms=reduced - prof.full_ms,
                         exposed_ms=r.best_graph_ms - reduced, comm_ms=r.comm_ms))
    out = pd.DataFrame(rows)
    out["speedup"] = out.reference_ms / out.best_graph_ms
    out["bound_speedup"] = out.reference_ms / out.bound_ms
    return out


def bar_summary(picked: pd.DataFrame, comm_share: float = 0.3, mode: str = "graph") -> dict:
    """The multi-GPU bar: median AllReduce speedup of the tuner's choice over cuBLAS + NCCL where
    communication is at least ``comm_share`` of the cuBLAS GEMM, and the worst shape of the sweep."""
    col = f"tuned_{mode}_speedup"
    # How the predicted partition compares with the best measured one, in the same mode.
    graph = mode in ("graph", "checked") and "predicted_vs_best_graph" in picked
    ratio = "predicted_vs_best_graph" if graph else "predicted_vs_best"
    heavy = picked[(picked.primitive == "all_reduce") & (picked.comm_over_cublas >= comm_share)]
    return {"mode": mode, "allreduce_shapes": len(heavy), "allreduce_median_speedup": float(heavy[col].median()),
            "worst_speedup": float(picked[col].min()), "max_speedup": float(picked[col].max()),
            "predicted_within_3pct": float((picked[ratio] <= 1.03).mean())}
