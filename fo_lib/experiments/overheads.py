"""Overheads of the reorder machinery: the signal/scatter epilogue in the GEMM and the fused
post-reorder RMSNorm, next to the paper's Table 5.

:func:`run` measures them on a GPU (:mod:`.kernel_bench`, the core of ``scripts/bench/bench_gemm.py``
and ``bench_postops.py``) into ``data/<gpu>[-quick]/``; the loaders read any recorded data set.
"""
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


def measure_plan(quick: bool = False) -> dict[str, dict]:
    """What :func:`run` measures, per record: its shapes, the benchmark's options and the equivalent
    script command line (recorded in the provenance sidecar). The GEMM runs as CUDA-graph replays
    (device time, as in the recorded ``gemm_portable.csv``) with the plain kernel timed twice
    (``--control``: the noise floor the figure draws)."""
    from . import kernel_bench as kb

    rounds, inner = kb.gemm_rounds(quick)
    g, p = (kb.GEMM_QUICK_SHAPES, kb.POSTOPS_QUICK_SHAPES) if quick else (kb.GEMM_SHAPES, kb.POSTOPS_SHAPES)

    def args(**axes):
        return " ".join(f"--{k} " + " ".join(map(str, v)) for k, v in axes.items())

    q = " --quick" if quick else ""
    return {
        "gemm_portable": dict(shapes=kb.gemm_shapes(quick),
                              options=dict(rounds=rounds, inner=inner, graph=True, control=True),
                              command=f"bench_gemm.py --graph --control{q} {args(**g)}"),
        "postops": dict(shapes=kb.postops_shapes(quick), options=dict(rounds=kb.postops_rounds(quick), graph=True),
                        command=f"bench_postops.py{q} {args(**p)}"),
    }


def run(mode: str = "auto", data_set: str = "h200", quick: bool = False) -> str:
    """Measure the GEMM epilogue and the post-reorder RMSNorm on this GPU and record them into
    ``data/<gpu>[-quick]/`` (:func:`measure_plan`), or keep the recorded ``data_set``; returns the
    data set the loaders above should read."""
    from . import kernel_bench as kb
    from .common import measured_set, record, resolve_mode

    if resolve_mode(mode) != "measure":
        return data_set
    tag = measured_set(quick)
    plan = measure_plan(quick)
    g = plan["gemm_portable"]
    df, _ = kb.run_gemm(g["shapes"], **g["options"])
    record(df, "gemm_portable", tag, link="none", dtype="bf16", order=kb.ORDER, seed=0,
           command=g["command"] + "  (fo_lib.experiments.overheads.run)", **g["options"])
    p = plan["postops"]
    df = kb.run_postops(p["shapes"], **p["options"])
    record(df, "postops", tag, link="none", dtype="bf16", command=p["command"] + "  (fo_lib.experiments.overheads.run)")
    return tag
