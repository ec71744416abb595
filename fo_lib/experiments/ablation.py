"""Fig. 14: the tuned partition against equal-size groups and against a tuner that misjudges the
wave size, each shape's variants timed in the same interleaved rounds.

Variants of one shape (``T`` waves of ``P`` tiles: ``P`` = the GEMM's persistent CTAs):

* ``tuned``: the refined model's partition (the overlap sweep's prediction);
* ``Egs=n``: equal-size groups of ``n`` waves, the last one taking the remainder
  (:func:`equal_groups`; ``Egs=T`` is one group: no overlap);
* ``wave size +20``: what the same model chooses when it believes a wave holds ``P + 20`` tiles
  (:func:`misconfigured_profile`): it sees ``T' = ceil(tiles / (P + 20))`` waves that split the
  GEMM's measured time evenly and carry ``P + 20`` tiles' bytes each, picks a partition of those,
  and the plan cuts its groups every ``P + 20`` tiles of the schedule (:class:`MisgroupedPlan`),
  so a group boundary falls inside a real wave and the group waits for that whole wave.

Measured with the overlap sweep's own pieces (:mod:`.overlap_measure.cases`: the case, its variants, the
interleaved rounds), recorded as ``data/<gpu>/ablation.csv`` with a provenance sidecar.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd

from .._util import ceil_div
from ..engine.plan import OverlapPlan
from .recorded import NO_DATA, load_or_none, no_data_figure

NAME = "ablation"
EXTRA_TILES = 20
MISCONFIGURED = ("misconfigured",)  # the plans dict's key of that variant (not a wave partition)
# Shapes whose communication and GEMM are within ~2x of each other on the emulated link, 4-16 waves.
CASES_QUICK = [("all_reduce", (4096, 8192, 16384)), ("all_reduce", (8192, 8192, 16384)),
               ("reduce_scatter", (4096, 8192, 16384))]
CASES_FULL = [(p, s) for p in ("all_reduce", "reduce_scatter")
              for s in ((2048, 8192, 16384), (4096, 8192, 16384), (8192, 8192, 16384))]
PAPER = {"statement": "A800 prefers large groups, the 4090 groups of one wave; equal-size groups and the "
                      "wave size misconfigured by +20 tiles both lose to the tuned partition",
         "setting": "2x RTX 4090 GEMM+AR, 4x A800 GEMM+RS (NCCL)"}
# The sweep's variants this figure needs beside the candidates (the others only cost time here).
BASELINES = ("gemm", "cublas", "comm", "cublas_then_comm")


def equal_groups(num_waves: int, size: int) -> tuple[int, ...]:
    """Groups of ``size`` waves, the last one the remainder: covers ``num_waves`` exactly."""
    if not 1 <= size <= num_waves:
        raise ValueError(f"a group size must be in [1, {num_waves}], got {size}")
    return (size,) * (num_waves // size) + ((num_waves % size,) if num_waves % size else ())


def egs_sizes(num_waves: int, quick: bool = False) -> list[int]:
    """Group sizes to time: every size from 1 to ``T`` (each gives a different partition), or in
    quick mode 1-4, T/2 and T."""
    if quick:
        return sorted(n for n in {1, 2, 3, 4, max(1, num_waves // 2), num_waves} if n <= num_waves)
    return list(range(1, num_waves + 1))


def misconfigured_profile(profile, grid, extra_tiles: int = EXTRA_TILES):
    """The profile a tuner builds when it believes a wave holds ``grid.ctas + extra_tiles`` tiles,
    and the grid whose waves are those believed waves: ``T' = ceil(tiles / (P + extra))`` waves,
    each taking the measured GEMM time / ``T'`` (a tuner that believes ``P + extra`` tiles run at
    once expects every wave to last one tile's time) and carrying its ``P + extra`` tiles' bytes
    (the last one the rest)."""
    believed = dataclasses.replace(grid, _ctas=grid.ctas + int(extra_tiles))
    if believed.ctas <= 0:
        raise ValueError(f"a wave of {believed.ctas} tiles")
    T = believed.num_waves
    elem = {"bf16": 2, "f16": 2}[profile.dtype]
    return dataclasses.replace(profile, wave_ms=(profile.total_ms / T,) * T,
                               wave_bytes=tuple(int(e) * elem for e in believed.wave_elements()),
                               meta={**profile.meta, "misconfigured_tiles_per_wave": believed.ctas}), believed


def misconfigured_groups(num_tiles: int, tiles_per_wave: int, partition) -> list[int]:
    """Tiles per group when ``partition`` groups believed waves of ``tiles_per_wave`` tiles (the
    schedule cut every ``tiles_per_wave`` tiles; the last group ends at the last tile)."""
    ends = np.minimum(np.cumsum(partition) * tiles_per_wave, num_tiles)
    if ends[-1] != num_tiles or ceil_div(num_tiles, tiles_per_wave) != sum(partition):
        raise ValueError(f"partition {partition} does not cover {num_tiles} tiles in waves of {tiles_per_wave}")
    return np.diff(np.concatenate(([0], ends))).astype(int).tolist()


class MisgroupedPlan(OverlapPlan):
    """An :class:`~fo_lib.engine.OverlapPlan` whose groups are cut every ``group_wave_tiles`` tiles of
    the GEMM's schedule (``partition`` groups waves of that size) while the GEMM still runs ``ctas``
    persistent CTAs: what a tuner with a wrong wave size builds. Only the grouping changes: the
    layout reads its tile -> group table off the plan's grid, the kernel launch reads ``ctas``."""

    def __init__(self, *args, group_wave_tiles: int, **kw):
        self.group_wave_tiles = int(group_wave_tiles)
        super().__init__(*args, **kw)

    def _choose_partition(self, partition, max_groups):
        # NOTES: called after the grid is set and before the layout is built from it.
        if self.schedule != "persistent":
            raise ValueError("a misgrouped plan cuts a persistent schedule")
        self.grid = dataclasses.replace(self.grid, _ctas=self.group_wave_tiles)
        return super()._choose_partition(partition, max_groups)


# --- measuring (GPU) --------------------------------------------------------------------------------
def _add_plans(case, comm, quick: bool, extra_tiles: int, curve):
    """Add the Egs and misconfigured plans to the sweep's case; return ``{variant: plans key}``, the
    misconfigured model's prediction and its believed grid."""
    from ..predictor import OverlapModel

    M, N, K, T = case.M, case.N, case.K, case.profile.num_waves
    kw = dict(config=case.config, ctas=case.profile.ctas, routing=case.routing, layout=case.layout,
              reduction=case.reduction)
    variants = {"tuned": case.predicted}
    for n in egs_sizes(T, quick):
        part = equal_groups(T, n)
        variants[f"Egs={n}"] = part
        if part not in case.plans:
            case.plans[part] = OverlapPlan(case.prim, M, N, K, comm, partition=part, **kw)
    mis_profile, believed = misconfigured_profile(case.profile, case.config.grid(M, N, case.profile.ctas), extra_tiles)
    mis = OverlapModel(mis_profile, curve, "refined", **case.model_params).tune().best
    case.plans[MISCONFIGURED] = MisgroupedPlan(case.prim, M, N, K, comm, partition=mis.partition,
                                               group_wave_tiles=believed.ctas, **kw)
    variants[f"wave size +{extra_tiles}"] = MISCONFIGURED
    return variants, mis, believed


def measure(comm=None, *, world: int = 2, quick: bool = False, cases=None, extra_tiles: int = EXTRA_TILES,
            rounds: int | None = None, inner: int | None = None, model_kw: dict | None = None,
            comm_sms: int | None = None) -> pd.DataFrame:
    """Per case ``(primitive, (M, N, K))``: every variant's overlapped call, one row each."""
    import torch
    from tqdm import tqdm

    from .. import gemm
    from .measure_common import link_label
    from .overlap_measure.cases import _case, _timings, _variants

    if comm is None:
        from ..comm.loopback import LoopbackCommunicator
        comm = LoopbackCommunicator(world)
    comm_sms = int(getattr(comm, "sm_footprint", 0) if comm_sms is None else comm_sms)
    # Variants differ by a few percent: more rounds than the heat map's (each call is only 2-6 ms).
    rounds, inner = rounds or (6 if quick else 10), inner or 3
    sms, rng, curves, rows = gemm.sm_count(), np.random.default_rng(0), {}, []
    for prim, shape in tqdm(cases or (CASES_QUICK if quick else CASES_FULL), desc="ablation", disable=comm.rank):
        # limit=1: the sweep's minimum, {predicted, finest (Egs=1), no overlap (Egs=T)}.
        case = _case(comm, prim, shape, sms=sms, comm_sms=comm_sms, schedule="persistent", layout="tiles",
                     reduction="collective", curves=curves, model_kw=model_kw, rng=rng, limit=1)
        variants, mis, believed = _add_plans(case, comm, quick, extra_tiles, curves[prim])
        fns = {k: f for k, f in _variants(case, comm, comm, graphs=False, root=comm.rank == 0).items()
               if k in BASELINES or k.startswith("ovl:")}
        t = _timings(case, comm, fns, rounds=rounds, inner=inner)
        base = dict(primitive=prim, M=case.M, N=case.N, K=case.K, world=comm.world_size, link=link_label(comm),
                    config=case.config.tile_name, waves=case.profile.num_waves, tiles=believed.num_tiles,
                    tiles_per_wave=case.profile.ctas, extra_tiles=extra_tiles, gemm_ms=t.med["gemm"],
                    cublas_ms=t.med["cublas"], comm_ms=t.med["comm"], cublas_then_comm_ms=t.med["cublas_then_comm"],
                    tuner_overlaps=case.tuned.best.total_ms < case.tuned.no_overlap.total_ms,
                    model_params=json.dumps(case.model_params))
        for label, key in variants.items():
            misc = key == MISCONFIGURED
            rows.append(base | dict(
                variant=label, egs=int(label[4:]) if label.startswith("Egs=") else 0,
                partition=str(list(mis.partition if misc else key)),
                groups_run=str(case.plans[key].group_tiles), groups=case.plans[key].num_groups, ms=t.ovl[key],
                model_ms=mis.total_ms if misc else case.model.predict(key).total_ms,
                believed_waves=believed.num_waves if misc else case.profile.num_waves))
        case.plans.clear()
        torch.cuda.empty_cache()
    return normalize(pd.DataFrame(rows))


def normalize(df: pd.DataFrame) -> pd.DataFrame:
    """``tuned_ms`` (the tuned variant's time of the same shape) and ``relative_to_tuned`` =
    tuned / variant: below 1 the variant is slower than the tuned partition."""
    key = ["primitive", "M", "N", "K"]
    tuned = df[df.variant == "tuned"].set_index(key).ms.rename("tuned_ms")
    df = df.drop(columns=["tuned_ms", "relative_to_tuned"], errors="ignore").join(tuned, on=key)
    return df.assign(relative_to_tuned=df.tuned_ms / df.ms)


def record(df: pd.DataFrame, data_dir, *, comm_sms: int = 4, **meta):
    from pathlib import Path

    from ..provenance import write_result
    from .common import check_record_folder

    if "quick" in meta:
        check_record_folder(data_dir, meta["quick"])
    return write_result(df, Path(data_dir) / f"{NAME}.csv", world_size=int(df.world.iloc[0]),
                        link=df.link.iloc[0], comm_sms=comm_sms, **meta)


def run(mode: str = "auto", data_set: str = "h200", quick: bool = False, model_kw="auto") -> str:
    """Measure and record (GPU), or keep the recorded data set; returns the data set to load."""
    from ..provenance import DATA_DIR
    from .common import measured_set, resolve_mode
    from .recorded import model_params

    if resolve_mode(mode) != "measure":
        return data_set
    df = measure(quick=quick, model_kw=model_params(model_kw) if isinstance(model_kw, str) else model_kw)
    tag = measured_set(quick)
    record(df, DATA_DIR / tag)
    return tag


def load(data_set: str = "h200"):
    """``(rows, meta)``, or ``(None, {})`` when nothing was recorded yet."""
    return load_or_none(data_set, NAME)


# --- summary and figure (CPU) ----------------------------------------------------------------------
TIE = 0.01  # within 1% of the tuned partition: the rounds' spread, neither a win nor a loss


def _outcome(relative: float) -> str:
    return "wins" if relative > 1 + TIE else "loses" if relative < 1 - TIE else "ties"


def summary(df: pd.DataFrame | None) -> pd.DataFrame:
    """Per shape: the tuned partition, the best equal group size that is not the tuned partition
    itself and how close it comes, the misconfigured wave size's result, and whether both lose to
    the tuned partition (a variant within :data:`TIE` of it ties); the paper's statement first (``df`` None: and a row that says nothing
    was recorded yet)."""
    rows = [{"shape": f"paper ({PAPER['setting']})", "verdict": PAPER["statement"]}]
    if df is None:  # nothing recorded yet
        return pd.DataFrame(rows + [{"shape": "ours (emulated link)", "verdict": NO_DATA}]).set_index("shape")
    for (prim, M, N, K), g in df.groupby(["primitive", "M", "N", "K"], sort=False):
        tuned = g[g.variant == "tuned"].partition.iloc[0]
        egs = g[g.egs > 0]
        other = egs[egs.partition != tuned]
        best = other.loc[other.relative_to_tuned.idxmax()] if len(other) else None
        mis = g[g.variant.str.startswith("wave size")].iloc[0]
        same = egs[egs.partition == tuned].egs.tolist()
        outcomes = ("loses" if best is None else _outcome(best.relative_to_tuned), _outcome(mis.relative_to_tuned))
        verdict = ("both lose" if outcomes == ("loses", "loses") else
                   "; ".join(f"{w} {o}" for w, o in zip((f"Egs={0 if best is None else int(best.egs)}", "misconfigured"),
                                                        outcomes) if o != "loses"))
        rows.append({"shape": f"{prim} {M}x{N}x{K} (emulated link)", "waves": int(g.waves.iloc[0]),
                     "tuned partition": tuned + (f" (= Egs={same[0]})" if same else ""),
                     "best other Egs": "-" if best is None else int(best.egs),
                     "its perf / tuned": "-" if best is None else round(float(best.relative_to_tuned), 3),
                     "Egs=1 / tuned": round(float(egs[egs.egs == 1].relative_to_tuned.iloc[0]), 3),
                     "misconfigured / tuned": round(float(mis.relative_to_tuned), 3),
                     "misconfigured groups (tiles)": mis.groups_run, "verdict": verdict})
    return pd.DataFrame(rows, dtype=object).set_index("shape").fillna("-")


def plot(df: pd.DataFrame | None, meta: dict):
    """One panel per shape: each variant's performance relative to the tuned partition (1 = tuned)."""
    import matplotlib.pyplot as plt

    from .common import PRIMITIVE_TITLES, stamp

    if df is None or df.empty:
        fig = no_data_figure("Fig. 14 · ablation (emulated link)", "scripts/record/record_figures.py --only ablation")
        stamp(fig, {"gpu": "no recorded data", "link": "emulated"} | meta, "emulated link")
        return fig
    shapes = list(df.groupby(["primitive", "M", "N", "K"], sort=False))
    fig, axes = plt.subplots(1, len(shapes), figsize=(max(5.0, 4.6 * len(shapes)), 4.4), squeeze=False,
                             layout="constrained")
    for ax, ((prim, M, N, K), g) in zip(axes[0], shapes):
        egs = g[g.egs > 0].sort_values("egs")
        extra = int(g.extra_tiles.iloc[0])
        mis = g[g.variant.str.startswith("wave size")]
        n = len(egs)
        ax.bar(range(n), egs.relative_to_tuned, color="tab:blue", label="equal groups of n waves")
        ax.bar([n], mis.relative_to_tuned, color="tab:orange",
               label=f"tuned for a wrong wave size ({extra} tiles too many)")
        ax.bar([n + 1], [1.0], color="tab:green", label="the tuned partition")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(n + 2), [f"{e}" for e in egs.egs] + [f"+{extra}\ntiles", "tuned"], fontsize=7)
        vals = list(egs.relative_to_tuned) + list(mis.relative_to_tuned) + [1.0]
        ax.set_ylim(max(0.0, min(vals) - 0.1), max(1.08, max(vals) + 0.04))
        ax.set(xlabel="waves per group n (blue), or the variant", ylabel="speed relative to the tuned partition",
               title=f"{PRIMITIVE_TITLES.get(prim, prim)} after a {M}x{N}x{K} GEMM ({int(g.waves.iloc[0])} waves)\n"
                     f"tuned partition {g[g.variant == 'tuned'].partition.iloc[0]}")
        ax.title.set_fontsize(8)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=3, fontsize=8)
    stamp(fig, meta, f"emulated link, W = {meta.get('world_size', '?')} virtual ranks")
    return fig
