"""Timeline of one overlapped call (notebook 07), measured and modelled.

Measured: :meth:`fo_lib.engine.OverlapPlan.timed_run` (CUDA events around the GEMM, after each wave
group's counter wait and after its collective, around the post-reorder). Modelled: the refined
model's per-group timeline for the same partition, from the GEMM profile and the link curve measured
in the same process. One call per shape is kept, the one of median length among ``repeats``.
"""
from __future__ import annotations

import pandas as pd

from .common import load, measured_set, resolve_mode

NAME = "timeline"
LOOPBACK_SHAPES = (("all_reduce", 4096, 8192, 8192), ("reduce_scatter", 4096, 8192, 8192),
                   ("all_to_all", 4096, 8192, 8192))
# Under NCCL: one GEMM-heavy and one communication-heavy AllReduce (Llama-3-70B TP=8 attention
# output projection), where the sweep hid almost none of the collective.
NCCL_SHAPES = (("all_reduce", 8192, 8192, 8192), ("all_reduce", 8192, 8192, 1024))


def measure(comm=None, *, shapes=LOOPBACK_SHAPES, repeats: int = 5, world: int = 2,
            reduction: str = "collective") -> pd.DataFrame:
    """Rows ``(primitive, M, N, K, partition, source, span, group, start_ms, end_ms)``, ``source``
    "measured" or "model"; spans ``gemm`` / ``group`` / ``post`` (model: ``gemm`` per group's waves,
    ``group`` per collective). ``comm``: the loopback of ``world`` virtual ranks by default, or a
    torch.distributed communicator (every rank calls this; rank 0's profile and curve decide).
    All-to-All shapes use the benchmarks' routing (:func:`~fo_lib.experiments.measure_common.benchmark_routing`).
    ``reduction``: the AllReduce plans' (``"post_reorder"``: an in-place AllGather per group summed by
    the post-reorder, modelled with the AllGather's curve; a ``reduction`` column says which)."""
    import torch

    from .. import gemm, partition_tuning
    from ..engine import OverlapPlan, group_collective
    from ..predictor import OverlapModel
    from .measure_common import _agree, benchmark_routing, link_label, measured_profile

    if comm is None:
        from ..comm.loopback import LoopbackCommunicator
        comm = LoopbackCommunicator(world)
    sms = gemm.sm_count()
    ctas = sms - int(getattr(comm, "sm_footprint", 0))
    rows = []
    for prim, M, N, K in shapes:
        cfg = gemm.auto_config(M, N, K, sms)
        routing = benchmark_routing(M, N, K, comm.world_size) if prim == "all_to_all" else None
        profile = measured_profile(comm, M, N, K, cfg, ctas, routing)
        red = reduction if prim == "all_reduce" else "collective"
        curve = _agree(comm, partition_tuning.measure_curve(comm, group_collective(prim, red),
                                                            partition_tuning.default_sizes(sum(profile.wave_bytes))))
        choice = OverlapModel(profile, curve, "refined").tune().best
        plan = OverlapPlan(prim, M, N, K, comm, config=cfg, ctas=ctas, partition=choice.partition, routing=routing,
                           reduction=red)
        a = torch.randn(M, K, device="cuda").bfloat16()
        b = torch.randn(N, K, device="cuda").bfloat16()
        plan.timed_run(a, b)  # warm-up
        calls = [plan.timed_run(a, b)[1] for _ in range(repeats)]
        calls.sort(key=lambda spans: spans[-1]["end_ms"])
        key = dict(primitive=prim, M=M, N=N, K=K, partition=str(list(choice.partition)), link=link_label(comm),
                   reduction=red)
        rows += [key | dict(source="measured") | r for r in calls[len(calls) // 2]]
        for g in choice.groups:
            rows.append(key | dict(source="model", span="gemm", group=g.group, start_ms=g.compute_start,
                                   end_ms=g.compute_end))
            rows.append(key | dict(source="model", span="group", group=g.group, start_ms=g.comm_start,
                                   end_ms=g.comm_end))
        del plan
        torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def run(mode: str = "auto", data_set: str = "h200", quick: bool = False) -> tuple[pd.DataFrame, dict]:
    """Measure on this GPU over the loopback link and record into ``data/<gpu>[-quick]/``, or load the
    recorded timeline of ``data_set`` (FileNotFoundError if it has none)."""
    if resolve_mode(mode) == "measure":
        from .common import record
        df = measure(shapes=LOOPBACK_SHAPES[:1] if quick else LOOPBACK_SHAPES, repeats=3 if quick else 5)
        record(df, NAME, measured_set(quick), link=str(df.link.iloc[0]), world_size=2)
        data_set = measured_set(quick)
    return load(data_set, NAME)


def recorded(data_sets) -> list[tuple[str, pd.DataFrame, dict]]:
    """``(data_set, timeline, provenance)`` for each of ``data_sets`` that holds a recorded timeline."""
    from ..provenance import DATA_DIR

    return [(ds, *load(ds, NAME)) for ds in data_sets if (DATA_DIR / ds / f"{NAME}.csv").exists()]


def _gantt(ax, lanes) -> None:
    """Draw ``lanes``, a list of (label, spans) with spans (group, start_ms, end_ms, hatched), top to
    bottom; wave group ``g`` (from 0) in the ``g``-th of one colour per group along a colour map (a
    timeline has up to ~20 groups, past the ten colours of the default cycle), group -1 (the whole
    GEMM) in grey, with a colour bar numbering the groups from 1."""
    from .figure_checks import colorbar_legend, discrete_colours

    groups = 1 + max([int(g) for _, spans in lanes for g, *_ in spans] + [0])
    colours = discrete_colours(groups)
    for y, (_, spans) in enumerate(lanes):
        for g, start, end, hatched in spans:
            ax.barh(y, end - start, left=start, color="0.6" if g < 0 else colours[int(g)], edgecolor="k", lw=0.4,
                    hatch="//" if hatched else None)
    ax.set_yticks(range(len(lanes)), [lab for lab, _ in lanes], fontsize=7)
    ax.set_ylim(len(lanes) - 0.5, -0.5)  # first lane on top
    ax.set_xlabel("ms from the GEMM's start")
    colorbar_legend(ax.figure, ax, colours, 1, "wave group (in order)", pad=0.01, aspect=12)


def plot(ax, df: pd.DataFrame) -> None:
    """Gantt rows for one shape: measured GEMM / collectives / post-reorder, and the model's waves of
    each group and its collectives, on a shared ms axis from the GEMM's start; colours are wave
    groups (keyed by a colour bar), hatched bars collectives."""
    lanes = [("measured", "gemm", "GEMM (measured)"), ("measured", "group", "collectives (measured)"),
             ("measured", "post", "post-reorder"), ("model", "gemm", "GEMM waves (model)"),
             ("model", "group", "collectives (model)")]
    _gantt(ax, [(label, [(r.group, r.start_ms, r.end_ms, span == "group")
                         for r in df[(df.source == source) & (df.span == span)].itertuples()])
                for source, span, label in lanes])


def plot_model(ax, prediction) -> None:
    """The model's timeline of one partition (a :class:`fo_lib.predictor` prediction): each group's
    GEMM waves and its collective (hatched)."""
    _gantt(ax, [("GEMM waves", [(g.group, g.compute_start, g.compute_end, False) for g in prediction.groups]),
                ("collectives", [(g.group, g.comm_start, g.comm_end, True) for g in prediction.groups])])


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per shape, measured beside modelled (ms from the GEMM's start): when the GEMM's last tile ends,
    when the first group's wait returns, when the last collective ends, and what the post-reorder
    adds after it (measured only: the model stops at the last collective)."""
    rows = []
    for (prim, M, N, K, part), g in df.groupby(["primitive", "M", "N", "K", "partition"], sort=False):
        meas, model = g[g.source == "measured"], g[g.source == "model"]
        mg, mm = meas[meas.span == "group"], model[model.span == "group"]
        post = meas[meas.span == "post"]
        rows.append(dict(primitive=prim, shape=f"{M}x{N}x{K}", partition=part, groups=len(mg),
                         gemm_end_ms=meas[meas.span == "gemm"].end_ms.max(),
                         model_gemm_end_ms=model[model.span == "gemm"].end_ms.max(),
                         first_ready_ms=mg.start_ms.min(), model_first_ready_ms=mm.start_ms.min(),
                         last_collective_end_ms=mg.end_ms.max(), model_last_collective_end_ms=mm.end_ms.max(),
                         post_tail_ms=(post.end_ms.max() - mg.end_ms.max()) if len(post) else float("nan"),
                         call_ms=meas.end_ms.max()))
    return pd.DataFrame(rows)
