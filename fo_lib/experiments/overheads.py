"""Overheads of the reorder machinery: the signal/scatter epilogue in the GEMM and the fused
post-reorder RMSNorm, next to the paper's Table 5."""
from __future__ import annotations

import pandas as pd

from .common import load

# Paper Table 5 (A800 / RTX 4090): RMSNorm with reorder (tile unit) and the GEMM epilogue (tile unit).
PAPER_TABLE5 = pd.DataFrame([
    dict(gpu="A800 (paper)", gemm_epilogue_pct=0.07, rmsnorm_reorder_pct=7.46),
    dict(gpu="RTX 4090 (paper)", gemm_epilogue_pct=0.35, rmsnorm_reorder_pct=8.80),
])


def gemm_overheads(data_set: str = "h200"):
    df, meta = load(data_set, "gemm_portable")
    wide = df.pivot_table(index=["M", "N", "K"], columns="variant", values="median_ms").reset_index()
    wide["signal_pct"] = (wide["signal"] / wide["ours"] - 1) * 100
    if "scatter" in wide:
        wide["scatter_pct"] = (wide["scatter"] / wide["ours"] - 1) * 100
    if "ours_again" in wide:  # the plain kernel timed twice (bench_gemm.py --control)
        wide["control_pct"] = (wide["ours_again"] / wide["ours"] - 1) * 100
    wide["ours_over_torch"] = wide["torch"] / wide["ours"]
    return wide, meta


def rmsnorm_overheads(data_set: str = "h200"):
    df, meta = load(data_set, "postops")
    rms = df[df.variant == "ours_rms"].copy()
    rms["overhead_pct"] = (rms.ratio.astype(float) - 1) * 100
    return rms, meta


def summary(data_set: str = "h200") -> pd.DataFrame:
    g, _ = gemm_overheads(data_set)
    r, meta = rmsnorm_overheads(data_set)
    ours = pd.DataFrame([dict(gpu=f"{meta.get('gpu', '?')} (ours)", gemm_epilogue_pct=float(g.signal_pct.median()),
                              rmsnorm_reorder_pct=float(r.overhead_pct.median()))])
    return pd.concat([PAPER_TABLE5, ours], ignore_index=True)
