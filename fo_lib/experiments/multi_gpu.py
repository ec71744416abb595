"""Multi-GPU NCCL measurements (``scripts/bench_nccl.py`` under torchrun): link curves, the SMs NCCL
takes from a GEMM, and the speedup sweep with the tuner's choice of partition, fallback and NCCL CTA
budget. Recorded in ``data/h200x<W>/``; measured again when 2+ GPUs are visible (``mode="auto"``).
"""
from __future__ import annotations

import subprocess
import sys

import pandas as pd

from . import load
from ..provenance import DATA_DIR, REPO_ROOT

PAPER = {"speedup_a800_nvlink": 1.30, "speedup_4090_pcie": 1.65}


def data_sets() -> list[str]:
    """Recorded multi-GPU data sets, largest world first (``h200x8`` before ``h200x2``)."""
    found = [p.name for p in DATA_DIR.glob("*x[0-9]*") if (p / "overlap_nccl.csv").exists()]
    return sorted(found, key=lambda n: -int(n.rsplit("x", 1)[1]))


def gpu_count() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def run(mode: str = "auto", data_set: str | None = None, quick: bool = False) -> str:
    """Measure with every visible GPU (``torchrun scripts/bench_nccl.py``) when asked and possible,
    else keep the recorded data; returns the data set to load."""
    from . import MODES

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    gpus = gpu_count()
    if mode == "measure" and gpus < 2:
        raise RuntimeError(f"mode='measure' needs 2+ GPUs for NCCL (found {gpus}); use mode='replay'")
    if mode == "measure" or (mode == "auto" and gpus >= 2):
        from ..provenance import gpu_tag
        data_set = f"{gpu_tag()}x{gpus}"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus),
               str(REPO_ROOT / "scripts" / "bench_nccl.py"), "--out", str(DATA_DIR / data_set)]
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


def tuner_pick(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (primitive, shape): the run the tuner would make without measuring candidates. Among the
    NCCL CTA budgets it takes the one whose predicted time (best partition, or the sequential
    fallback) is lowest; ``tuned_ms`` is what that choice measured. The reference is the fastest
    measured sequential run (torch.matmul, then NCCL with any budget)."""
    if "nccl_max_ctas" not in summary:
        summary = summary.assign(nccl_max_ctas=0)
    summary = summary.assign(predicted_choice_ms=summary[["predicted_model_ms", "predicted_sequential_ms"]].min(axis=1))
    rows = []
    for _, g in summary.groupby(["primitive", "M", "N", "K"], sort=False):
        row = g.loc[g.predicted_choice_ms.idxmin()].copy()
        seq = g.sequential_ms.min()
        row["sequential_ms"] = seq
        row["tuned_ms"] = row.overlap_predicted_ms if row.tuner_overlaps else seq
        row["tuned_speedup_vs_sequential"] = seq / row.tuned_ms
        row["best_speedup_vs_sequential"] = seq / g.best_ms.min()
        row["decomposition_speedup_vs_sequential"] = seq / g[["decomp2_ms", "decomp4_ms"]].min(axis=None)
        row["symm_mem_speedup_vs_sequential"] = seq / g.symm_mem_fused_ms.min()
        rows.append(row)
    return pd.DataFrame(rows).reset_index(drop=True)


def bar_summary(picked: pd.DataFrame, comm_share: float = 0.3) -> dict:
    """The multi-GPU bar: median AllReduce speedup where communication is at least ``comm_share`` of
    the cuBLAS GEMM, and the worst shape of the whole sweep."""
    heavy = picked[(picked.primitive == "all_reduce") & (picked.comm_over_cublas >= comm_share)]
    return {"allreduce_shapes": len(heavy), "allreduce_median_speedup": float(heavy.tuned_speedup_vs_sequential.median()),
            "worst_speedup": float(picked.tuned_speedup_vs_sequential.min()),
            "predicted_within_3pct": float((picked.predicted_vs_best <= 1.03).mean())}
