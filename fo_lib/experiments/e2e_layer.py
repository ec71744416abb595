"""Fig. 12 / Table 4: a whole layer with its projections overlapped against the same layer without
overlap, on the layers of :mod:`.e2e_blocks` (a Llama 3 70B tensor-parallel block, a Mixtral 8x7B
MoE combine step), at the paper's sizes scaled to the world size.

Per (layer, world size): both versions are built from one seed with the same weights, checked
against the float64 reference of the whole layer, and timed in interleaved rounds (medians, the
slowest rank's). On one GPU the link is the loopback of ``W`` identical virtual ranks (labelled
"emulated"); under torchrun it is NCCL. :func:`cpu_check` runs the same check on the CPU loopback
(no timing): the notebook's fallback and the tests. Recorded as ``data/<gpu>/e2e_layer.csv``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .e2e_blocks import (ATTENTION, BaselineBlock, BaselineMoE, BlockShape, OverlappedBlock, OverlappedMoE,
                         dense_inputs, dense_reference, dense_weights, identical_ranks, moe_inputs, moe_reference,
                         moe_routing)
from .recorded import NO_DATA, load_or_none, no_data_figure

NAME = "e2e_layer"
TOLERANCE = 2e-2  # relative Frobenius error of a bf16 layer against float64 (the GPU tests' bound)
PAPER = {"speedup": (1.05, 1.13), "setting": "8x A800 (NVLink), Table 4 workloads, whole models"}

# Table 4's layers: Llama 3 70B served with TP 8 in 16384-token chunks; Mixtral 8x7B with EP 4
# (x TP 2 in the paper; here EP only) on 32768 tokens. ``world`` is the paper's degree, the default.
LLAMA3_70B = dict(hidden=8192, intermediate=28672, heads=64, kv_heads=8, head_dim=128, world=8)
MIXTRAL_8X7B = dict(hidden=4096, intermediate=14336, experts=8, top_k=2, world=4)
SHAPES = {
    "full": [BlockShape("llama3-70b", 16384, **LLAMA3_70B), BlockShape("llama3-70b", 4096, **LLAMA3_70B),
             BlockShape("mixtral-8x7b", 32768, **MIXTRAL_8X7B), BlockShape("mixtral-8x7b", 8192, **MIXTRAL_8X7B)],
    "quick": [BlockShape("llama3-70b", 4096, **LLAMA3_70B), BlockShape("mixtral-8x7b", 8192, **MIXTRAL_8X7B)],
    # The CPU check's (and the tests'): several wave groups per projection with CPU_PLAN_KW, W in 1, 2, 4.
    "small": [BlockShape("small-dense", 128, 256, 512, heads=8, kv_heads=4, head_dim=32, world=2),
              BlockShape("small-moe", 256, 128, 256, experts=8, top_k=2, world=2)],
}
CPU_PLAN_KW = {"config": "64x64x32", "sm_count": 2}  # 64x64 tiles on 2 "SMs": several waves per GEMM


def cpu_plan_kw() -> dict:
    from .. import gemm

    return dict(CPU_PLAN_KW, config=gemm.CONFIGS[CPU_PLAN_KW["config"]])


class Case:
    """One layer at one world size on one rank: both versions with the same weights, their inputs,
    and the float64 reference of this rank's output (``reference()``: ``(y, h2)`` for a dense block,
    ``(y,)`` for the MoE step). No closure holds the case itself: a dropped case frees its plans
    (pinned buffers, captured graphs) at once, not later from the cyclic GC."""

    def __init__(self, shape: BlockShape, comm, *, device: str, seed: int = 0, attention: str = "sdpa",
                 plan_kw=None):
        import torch

        if attention not in ATTENTION:
            raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
        W, dt = comm.world_size, torch.bfloat16
        own = 0 if identical_ranks(comm) else comm.rank  # identical virtual ranks all hold rank 0's data
        self.shape, self.comm, self.attention = shape, comm, attention
        if shape.moe:
            inp = moe_inputs(shape, W, own, seed, device, dt)
            routing = moe_routing(shape, W, seed)
            self.ours = OverlappedMoE(shape, comm, inp, routing, device=device, plan_kw=plan_kw)
            self.baseline = BaselineMoE(self.ours)
            self.args = (inp.rows,)
            source = (lambda s: inp) if identical_ranks(comm) else (
                lambda s: inp if s == comm.rank else moe_inputs(shape, W, s, seed, device, dt))
            self.reference = lambda: (moe_reference(shape, routing, comm.rank, source, inp),)
        else:
            w = dense_weights(shape, W, own, seed, device, dt)
            self.ours = OverlappedBlock(shape, comm, w, device=device, attention=attention, plan_kw=plan_kw)
            self.baseline = BaselineBlock(shape, comm, w, attention=attention)
            args = self.args = dense_inputs(shape, seed, device, dt)
            shard = (lambda r: w) if identical_ranks(comm) else (
                lambda r: w if r == comm.rank else dense_weights(shape, W, r, seed, device, dt))
            self.reference = lambda: dense_reference(shape, W, shard, *args, attention)

    def outputs(self, fn) -> tuple:
        out = fn(*self.args)
        return out if isinstance(out, tuple) else (out,)


def check(case: Case) -> dict:
    """Relative errors of the layer's output (and, for the dense block, of the residual stream it
    hands on) against float64, of the baseline likewise, and between the two."""
    from ..testing import calc_diff

    ours, base, ref = case.outputs(case.ours), case.outputs(case.baseline), case.reference()
    nan = float("nan")
    return dict(rel_err=calc_diff(ours[0], ref[0]), baseline_rel_err=calc_diff(base[0], ref[0]),
                ours_vs_baseline=calc_diff(ours[0], base[0]),
                residual_rel_err=calc_diff(ours[1], ref[1]) if len(ref) > 1 else nan)


def time_case(case: Case, *, rounds: int, inner: int, seed=0) -> dict:
    """``{"ours": ms, "baseline": ms}``: medians of interleaved rounds in a seeded random order per
    round (the same on every rank), the slowest rank's (CUDA)."""
    from ..testing import bench_interleaved, summarize
    from ..partition_tuning import slowest_rank

    fns = {"ours": lambda i: case.ours(*case.args), "baseline": lambda i: case.baseline(*case.args)}
    samples = bench_interleaved(fns, rounds=rounds, inner=inner, warmup=1, order="shuffle", seed=seed)
    return slowest_rank(case.comm, summarize(samples))


def _cases(shapes, worlds) -> list[tuple[BlockShape, int]]:
    """(shape, world) pairs, every one validated before anything runs."""
    pairs = [(s, int(w)) for s in shapes for w in (worlds or [s.world])]
    for s, w in pairs:
        s.local(w)
    return pairs


# The record's columns: errors are relative Frobenius errors of the layer's output against float64
# (rel_err: overlapped; residual_rel_err: the residual stream the dense block hands on); gemms: each
# overlapped GEMM (M x N x K on a rank) and its partition into wave groups.
COLUMNS = ("layer", "kind", "tokens", "hidden", "intermediate", "world_size", "link", "attention", "ours_ms",
           "baseline_ms", "speedup", "rel_err", "baseline_rel_err", "ours_vs_baseline", "residual_rel_err", "gemms")


def _row(case: Case, errs: dict, times: dict, link: str) -> dict:
    s = case.shape
    row = dict(layer=s.layer, kind="moe" if s.moe else "dense", tokens=s.tokens, hidden=s.hidden,
               intermediate=s.intermediate, world_size=case.comm.world_size, link=link,
               attention="-" if s.moe else case.attention, ours_ms=times["ours"], baseline_ms=times["baseline"],
               speedup=times["baseline"] / times["ours"], **errs,
               gemms=" | ".join(f"{p.M}x{p.N}x{p.K} {list(p.partition)}" for p in case.ours.plans))
    assert tuple(row) == COLUMNS, set(row) ^ set(COLUMNS)
    return row


def measure(comm=None, *, worlds=None, quick: bool = False, shapes=None, rounds: int | None = None,
            inner: int | None = None, attention: str = "sdpa", seed: int = 0) -> pd.DataFrame:
    """Check and time every layer (GPU). ``comm``: a communicator (under torchrun; every rank calls
    this), else one loopback link per world size (``worlds``; default each layer's Table 4 degree)."""
    import torch
    from tqdm import tqdm

    from .measure_common import link_label

    shapes = shapes or SHAPES["quick" if quick else "full"]
    pairs = _cases(shapes, [comm.world_size] if comm is not None else worlds)
    rounds, inner = rounds or (4 if quick else 8), inner or 2
    root = comm is None or comm.rank == 0
    links, rows = {}, []
    for shape, W in tqdm(pairs, desc="e2e layers", disable=not root):
        if comm is None and W not in links:
            from ..comm.loopback import LoopbackCommunicator
            links[W] = LoopbackCommunicator(W)
        c = comm or links[W]
        case = Case(shape, c, device="cuda", seed=seed, attention=attention)
        errs = check(case)
        times = time_case(case, rounds=rounds, inner=inner, seed=(seed, len(rows)))
        for plan in case.ours.plans:
            plan.check()  # a counter wait that timed out in any call raises here
        row = _row(case, errs, times, link_label(c))
        rows.append(row)
        if root:
            tqdm.write(f"{row['layer']} T={row['tokens']} W={W}: ours {row['ours_ms']:.3f} ms, baseline "
                       f"{row['baseline_ms']:.3f} ms, speedup {row['speedup']:.3f}, rel. err {row['rel_err']:.2e}")
        del case  # its plans go now (no cycle), before a larger case may regrow the link's staging buffers
        torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def cpu_check(worlds=(1, 2, 4), shapes=None, attention: str = "sdpa", seed: int = 0, comm=None) -> pd.DataFrame:
    """The check of :func:`measure` on the CPU, no timing: on the CPU loopback (W identical virtual
    ranks) per world size, or on ``comm`` (gloo under torchrun: every rank calls this)."""
    from ..comm.cpu_loopback import CpuLoopbackCommunicator

    rows = []
    for shape, W in _cases(shapes or SHAPES["small"], [comm.world_size] if comm is not None else worlds):
        case = Case(shape, comm or CpuLoopbackCommunicator(W), device="cpu", seed=seed, attention=attention,
                    plan_kw=cpu_plan_kw())
        errs = check(case)
        rows.append(dict(layer=shape.layer, tokens=shape.tokens, hidden=shape.hidden, world_size=W, **errs,
                         groups=" | ".join(str(p.num_groups) for p in case.ours.plans),
                         ok=max(errs["rel_err"], errs["baseline_rel_err"]) < TOLERANCE))
    return pd.DataFrame(rows)


# --- records, replay, figure -------------------------------------------------------------------------
def record(df: pd.DataFrame, path, **meta):
    from ..provenance import write_result

    return write_result(df, path, world_size=int(df.world_size.max()), link=str(df.link.iloc[0]), **meta)


def run(mode: str = "auto", data_set: str = "h200", quick: bool = False) -> str:
    """Measure on this GPU's loopback link and record (``mode`` measure / auto with a GPU), or keep the
    recorded data set; returns the data set to load."""
    from ..provenance import DATA_DIR
    from .common import measured_set, resolve_mode

    if resolve_mode(mode) != "measure":
        return data_set
    tag = measured_set(quick)
    record(measure(quick=quick), DATA_DIR / tag / f"{NAME}.csv")
    return tag


def load(data_set: str = "h200"):
    """``(rows, meta)``, or ``(None, {})`` when nothing was recorded yet."""
    return load_or_none(data_set, NAME)


def summary(df: pd.DataFrame | None) -> pd.DataFrame:
    """The paper's end-to-end speedup first, then ours per layer (or a row saying nothing was recorded)."""
    lo, hi = PAPER["speedup"]
    rows = [{"layer": f"paper ({PAPER['setting']})", "speedup": f"{lo:.2f}-{hi:.2f}x"}]
    if df is None:
        return pd.DataFrame(rows + [{"layer": "ours", "speedup": NO_DATA}]).set_index("layer")
    for r in df.itertuples():
        rows.append({"layer": f"{r.layer} T={r.tokens} W={r.world_size} ({r.link})", "ours_ms": round(r.ours_ms, 3),
                     "baseline_ms": round(r.baseline_ms, 3), "speedup": f"{r.speedup:.3f}x",
                     "rel_err": f"{r.rel_err:.1e}"})
    return pd.DataFrame(rows, dtype=object).set_index("layer").fillna("-")


def plot(df: pd.DataFrame | None, meta: dict, checked: pd.DataFrame | None = None):
    """Speedup per layer beside the paper's band; with nothing recorded, the CPU check's errors
    (``checked``, from :func:`cpu_check`) or a figure that says so."""
    import matplotlib.pyplot as plt

    from .common import stamp

    if df is None or df.empty:
        if checked is None:
            fig = no_data_figure("Fig. 12 · end-to-end layer", "scripts/bench/bench_e2e_layer.py on a GPU")
        else:
            fig, ax = plt.subplots(figsize=(7, 3.2))
            labels = [f"{r.layer}\nW={r.world_size}" for r in checked.itertuples()]
            x = range(len(labels))
            ax.bar([i - 0.2 for i in x], checked.rel_err, 0.4, label="overlapped vs float64")
            ax.bar([i + 0.2 for i in x], checked.baseline_rel_err, 0.4, label="baseline vs float64")
            ax.axhline(TOLERANCE, color="k", lw=0.8, ls="--", label=f"tolerance {TOLERANCE:g}")
            ax.set_xticks(list(x), labels, fontsize=7)
            ax.set(ylim=(0, 1.25 * TOLERANCE), ylabel="relative error (Frobenius)",
                   title="No GPU record yet: the layer's CPU-loopback correctness check (bf16)")
            ax.title.set_fontsize(9)
            ax.legend(fontsize=7)
            fig.tight_layout()
        stamp(fig, {"gpu": "no recorded data", "link": "emulated (CPU loopback)"} | meta)
        return fig
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(df) + 2), 3.6))
    labels = [f"{r.layer}\nT={r.tokens} W={r.world_size}" for r in df.itertuples()]
    colors = {"dense": "tab:blue", "moe": "tab:orange"}
    for kind, name in (("dense", "TP block (2x GEMM + AllReduce)"), ("moe", "MoE combine (GEMM + All-to-All)")):
        rows = np.flatnonzero((df.kind == kind).to_numpy())
        if len(rows):
            bars = ax.bar(rows, df.speedup.iloc[rows], color=colors[kind], label=name)
            ax.bar_label(bars, [f"{v:.3f}x" for v in df.speedup.iloc[rows]], fontsize=7, padding=2,
                         bbox=dict(facecolor="white", lw=0, pad=0.5))
    lo, hi = PAPER["speedup"]
    ax.axhspan(lo, hi, color="tab:green", alpha=0.15, label=f"paper {lo:.2f}-{hi:.2f}x (whole models, A800)")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylim(min(0.9, df.speedup.min() - 0.05), max(1.2, df.speedup.max() + 0.08))
    ax.set_xticks(range(len(df)), labels, fontsize=7)
    ax.set(xlabel="layer (T: tokens, W: ranks)", ylabel="speedup (baseline time / overlapped)",
           title="One layer with its projections overlapped, against torch.matmul then the collective")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    stamp(fig, meta)
    return fig
