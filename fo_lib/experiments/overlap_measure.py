"""The overlap benchmark, measured (GPU): per (primitive, shape), every candidate partition's
overlapped call (eager and as one CUDA graph) beside the non-overlapped baselines and the refined
model's prediction, plus the host cost of an overlapped call.

``scripts/bench/bench_overlap.py`` (one GPU, loopback link) and ``scripts/bench/bench_nccl.py`` (torchrun, NCCL)
call :func:`measure` and :func:`write_records`; :mod:`.overlap` loads and summarises the records.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd

from .measure_common import (LINK, QUICK_SHAPES, SHAPES, _agree, benchmark_routing, full_collective,
                             link_label, measured_profile)


def candidate_partitions(T: int, predicted, rng, limit: int):
    """Partitions to time: all of them when few, else the predicted, finest, no-overlap and random ones."""
    from .. import partition as P

    if P.count_partitions(T) <= limit:
        return list(P.compositions(T))
    cands = {tuple(predicted), P.finest(T), P.no_overlap(T)}
    while len(cands) < limit:  # random compositions: each gap cut with probability 1/2
        cands.add(P.from_cuts(rng.random(T - 1) < rng.uniform(0.1, 0.9)))
    return sorted(cands)


def load_model_params(spec: str, auto_path) -> dict | None:
    """The refined model's parameters per primitive for a benchmark: ``spec`` is a JSON file (a
    calibration sidecar's ``fitted_on_all_shapes``, or the mapping itself), or ``"auto"``: the
    sidecar at ``auto_path`` if it exists (fitted on an earlier run), else None (the defaults)."""
    from pathlib import Path

    path = Path(auto_path) if spec == "auto" else Path(spec)
    if not path.exists():
        if spec != "auto":
            raise FileNotFoundError(f"no model parameters at {path}")
        return None
    doc = json.loads(path.read_text())
    return doc.get("fitted_on_all_shapes", doc)


def _symm_mem_matmul_rs(comm, a, b):
    """PyTorch's fused matmul + ReduceScatter over symmetric memory (contiguous row blocks), or None
    where it does not run (no NCCL process group, an older torch, a device without P2P)."""
    if comm.link != "nccl" or a.shape[0] % comm.world_size:
        return None
    try:
        import torch
        import torch.distributed._symmetric_memory as symm_mem

        group = getattr(comm, "group", None) or torch.distributed.group.WORLD
        symm_mem.enable_symm_mem_for_group(group.group_name)
        fn = lambda i: torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b.T, "sum", 0, group.group_name)  # noqa: E731
        fn(0)
        torch.cuda.synchronize()
        return fn
    except Exception as exc:  # noqa: BLE001 - record that it does not run here, keep measuring
        print(f"symmetric-memory fused_matmul_reduce_scatter does not run here: {type(exc).__name__}: {exc}",
              flush=True)
        return None


def measure(comm=None, *, world: int = 2, quick: bool = False,
            primitives=("all_reduce", "reduce_scatter", "all_to_all"), candidates_limit: int = 12,
            comm_sms: int | None = None, shapes=None, rounds: int | None = None, inner: int | None = None,
            model_kw: dict | None = None, graphs: bool = True, schedule: str = "persistent",
            layout: str = "tiles", reduction: str = "collective", baseline_comm=None):
    """Overlapped vs sequential vs decomposition, and every candidate partition's latency next to the
    refined model's prediction.

    ``comm`` is any communicator: the loopback (emulated) link of ``world`` virtual ranks on one GPU
    (the default), or NCCL under torchrun (every rank calls this; rank 0's profiles and choices are
    broadcast so that all ranks run the same collectives, and each time is the slowest rank's).
    ``shapes`` is a list of ``(M, N, K)`` or a dict ``{primitive: [(M, N, K), ...]}``; ``comm_sms``
    (SMs the GEMM leaves free, an int or ``{primitive: int}``) defaults to the communicator's SM
    footprint. ``model_kw`` (``{primitive: {launch_ms, comm_slowdown, gemm_slowdown}}``) are the
    refined model's parameters, e.g. fitted by ``scripts/record/calibrate_overlap.py`` on an earlier run.
    ``graphs``: also time every candidate replayed as one CUDA graph (``OverlapPlan.capture``), the
    mode without host work per group. ``schedule``: the GEMM's CTA schedule
    (:class:`fo_lib.engine.OverlapPlan`; ``"per_tile"`` ignores ``comm_sms``). ``layout``: the
    AllReduce plans' layout (``"rows"``: groups of whole tile rows, the GEMM in a row-major raster,
    no post-reorder; the other primitives keep ``"tiles"``). ``reduction``: the AllReduce and
    ReduceScatter plans' (``"post_reorder"``: an in-place AllGather, or an All-to-All of each rank's
    chunks, per group, summed by the post-reorder; the model then uses that collective's curve). ``baseline_comm``: the communicator of the non-overlapped
    baselines' collectives (``comm_ms``, ``cublas_then_comm_ms``, ``ours_sequential_ms``; default
    ``comm``), e.g. NCCL's default communicator when ``comm`` is a copy-engine one.

    Returns ``(summary, candidates, saved)``: one row per (primitive, shape) (columns
    :data:`SUMMARY_COLUMNS`), one row per measured partition, and the GEMM profiles and link curves
    as JSON-ready dicts.
    """
    import torch
    from tqdm import tqdm

    from .. import gemm

    if comm is None:
        from ..comm.loopback import LoopbackCommunicator
        comm = LoopbackCommunicator(world)
    root = comm.rank == 0
    baseline_comm = baseline_comm or comm
    if comm_sms is None:
        comm_sms = int(getattr(comm, "sm_footprint", 0))
    sms_free = comm_sms if isinstance(comm_sms, dict) else {p: int(comm_sms) for p in primitives}
    shapes = shapes or (QUICK_SHAPES if quick else SHAPES)
    per_prim = shapes if isinstance(shapes, dict) else {p: shapes for p in primitives}
    rounds = rounds or (4 if quick else 6)
    inner = inner or (2 if quick else 3)
    sms = gemm.sm_count()
    rng = np.random.default_rng(0)
    rows, cand_rows, curves = [], [], {}
    saved = {"profiles": [], "curves": {}}
    for prim in primitives:
        for shape in tqdm(per_prim.get(prim, []), desc=prim, disable=not root):
            case = _case(comm, prim, shape, sms=sms, comm_sms=sms_free[prim], schedule=schedule, layout=layout,
                         reduction=reduction, curves=curves, model_kw=model_kw, rng=rng, limit=candidates_limit)
            fns = _variants(case, comm, baseline_comm, graphs=graphs, root=root)
            times = _timings(case, comm, fns, rounds=rounds, inner=inner)
            row = _summary_row(case, comm, schedule, times)
            rows.append(row)
            cand_rows += _candidate_rows(case, comm, times)
            saved["profiles"].append(case.profile.to_dict() | {"primitive": prim})
            if root:
                tqdm.write(_progress_line(row))
            case.plans.clear()
            torch.cuda.empty_cache()
    saved["curves"] = {k: v.to_dict() for k, v in curves.items()}
    return pd.DataFrame(rows), pd.DataFrame(cand_rows), saved


@dataclasses.dataclass(frozen=True)
class _Case:
    """One (primitive, shape) of the sweep: its GEMM, its inputs, the model's choice and one plan per
    candidate partition."""

    prim: str
    M: int
    N: int
    K: int
    config: object
    layout: str
    reduction: str
    comm_sms: int
    routing: object             # the All-to-All's routing (None for the other primitives)
    profile: object             # the GEMM profile on the CTAs the plans run
    model: object               # the refined OverlapModel
    model_params: dict
    tuned: object               # the model's tune() result
    plans: dict                 # candidate partition -> OverlapPlan
    a: object
    b: object

    @property
    def predicted(self) -> tuple:
        return tuple(self.tuned.best.partition)


def _case(comm, prim: str, shape, *, sms: int, comm_sms: int, schedule: str, layout: str, reduction: str,
          curves: dict, model_kw, rng, limit: int) -> _Case:
    """Profile the GEMM, measure the link curve once per primitive (kept in ``curves``), tune the
    model and build a plan per candidate partition."""
    import torch

    from .. import gemm, tuning
    from ..engine import OverlapPlan, group_collective, layout_config
    from ..predictor import OverlapModel

    M, N, K = shape
    plan_layout = layout if prim == "all_reduce" else "tiles"
    plan_reduction = reduction if prim in ("all_reduce", "reduce_scatter") else "collective"
    cfg = layout_config(gemm.auto_config(M, N, K, sms), plan_layout)
    a = torch.randn(M, K, device="cuda").bfloat16()
    b = torch.randn(N, K, device="cuda").bfloat16()
    routing = benchmark_routing(M, N, K, comm.world_size) if prim == "all_to_all" else None
    ctas = sms - comm_sms if schedule == "persistent" else sms
    profile = measured_profile(comm, M, N, K, cfg, ctas, routing)
    if prim not in curves:
        curves[prim] = _agree(comm, tuning.measure_curve(comm, group_collective(prim, plan_reduction),
                                                         tuning.default_sizes(2 * 8192 * 16384)))
    params = (model_kw or {}).get(prim) or {"launch_ms": 0.01}
    model = OverlapModel(profile, curves[prim], "refined", **params)
    tuned = model.tune()
    cands = candidate_partitions(profile.num_waves, tuned.best.partition, rng, limit)
    plans = {c: OverlapPlan(prim, M, N, K, comm, config=cfg, ctas=ctas, partition=c, routing=routing,
                            schedule=schedule, layout=plan_layout, reduction=plan_reduction)
             for c in cands}
    return _Case(prim, M, N, K, cfg, plan_layout, plan_reduction, comm_sms, routing, profile, model, params,
                 tuned, plans, a, b)


def _variants(case: _Case, comm, baseline_comm, *, graphs: bool, root: bool) -> dict:
    """Every timed function of one case by name: our GEMM and cuBLAS alone, the collective alone, the
    non-overlapped baselines, each candidate overlapped (``ovl:[...]``) and, with ``graphs``,
    replayed as one CUDA graph (``graph:[...]``)."""
    import torch
    from tqdm import tqdm

    from .. import baselines, gemm

    prim, M, N, cfg, a, b = case.prim, case.M, case.N, case.config, case.a, case.b
    world = comm.world_size
    run_gemm = gemm.kernels_for(cfg)
    any_plan = next(iter(case.plans.values()))
    out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    full = torch.randn(M * N, device="cuda").bfloat16()
    # All-to-All moves what the routing sends, not equal splits (a skewed routing moves more
    # off-rank from the rank that keeps the fewest rows).
    split = None if case.routing is None else (np.bincount(case.routing.dest[comm.rank], minlength=world) * N).tolist()
    recv_full = torch.empty(max(M * N, world * max(split or [0])), dtype=torch.bfloat16, device="cuda")
    fns = {
        "gemm": lambda i: run_gemm.gemm_nt(a, b, out, config=cfg),
        "cublas": lambda i: torch.matmul(a, b.T, out=out),
        "comm": lambda i: full_collective(baseline_comm, prim, full, recv_full, split),
        "sequential": lambda i: baselines.sequential(any_plan, a, b),
        # The paper's non-overlapped baseline at its leanest: cuBLAS, then the collective on
        # the whole output in place (no row bookkeeping, no post-ops).
        "cublas_then_comm": lambda i: (torch.matmul(a, b.T, out=out),
                                       full_collective(baseline_comm, prim, out.view(-1), recv_full, split)),
        "ours_sequential": lambda i: (run_gemm.gemm_nt(a, b, out, config=cfg),
                                      full_collective(baseline_comm, prim, full, recv_full, split)),
        "decomp2": lambda i: baselines.decomposition(any_plan, a, b, chunks=2),
        "decomp4": lambda i: baselines.decomposition(any_plan, a, b, chunks=4),
    }
    if prim == "reduce_scatter":
        fused = _symm_mem_matmul_rs(comm, a, b)
        if fused is not None:
            fns["symm_mem_fused"] = fused
    for c, plan in case.plans.items():
        fns[f"ovl:{list(c)}"] = (lambda p: lambda i: p.run(a, b))(plan)
    if graphs:
        try:
            for c, plan in case.plans.items():
                fns[f"graph:{list(c)}"] = (lambda g: lambda i: g())(plan.capture(a, b))
        except Exception as exc:  # noqa: BLE001 - a link that cannot be captured: record and go on
            fns = {k: v for k, v in fns.items() if not k.startswith("graph:")}
            if root:
                tqdm.write(f"CUDA-graph capture failed: {type(exc).__name__}: {exc}")
    return fns


@dataclasses.dataclass(frozen=True)
class _Timings:
    """The medians of one case (each the slowest rank's), per candidate and the tuner's check."""

    med: dict                   # variant name -> ms
    ovl: dict                   # candidate -> overlapped ms
    graph: dict                 # candidate -> graph-replay ms (NaN where nothing was captured)
    check: dict                 # the tuner's short check: {"overlap": ms, "fallback": ms}

    @property
    def best(self) -> tuple:
        return min(self.ovl, key=self.ovl.get)

    @property
    def best_graph(self) -> tuple:
        return min(self.graph, key=lambda c: self.graph[c] if self.graph[c] == self.graph[c] else float("inf"))


def _timings(case: _Case, comm, fns: dict, *, rounds: int, inner: int) -> _Timings:
    """Time every variant in interleaved rounds, run the tuner's check, and verify every plan."""
    from .. import tuning
    from ..testing import bench_interleaved, summarize

    med = tuning.slowest_rank(comm, summarize(bench_interleaved(fns, rounds=rounds, inner=inner, warmup=1)))
    # The check a tuner can afford before it commits: one short round of the predicted partition (a
    # graph replay where there is one) against cuBLAS then the collective, separate from the rounds
    # reported above, so that deciding on it does not pick noise.
    pred = list(case.predicted)
    pred_fn = fns.get(f"graph:{pred}", fns[f"ovl:{pred}"])
    check = tuning.OverlapCheck(rounds=3, inner=inner).timings(
        comm, lambda: pred_fn(0), lambda: fns["cublas_then_comm"](0))
    for plan in case.plans.values():
        plan.check()
    nan = float("nan")
    return _Timings(med, {c: med[f"ovl:{list(c)}"] for c in case.plans},
                    {c: med.get(f"graph:{list(c)}", nan) for c in case.plans}, check)


# --- the summary row, one section per measured quantity -------------------------------------------
SUMMARY_COLUMNS = (
    "primitive", "M", "N", "K", "world", "link", "waves", "config", "schedule", "layout", "reduction",
    "copy_engine", "gemm_ms", "cublas_ms", "comm_ms", "comm_over_gemm", "comm_over_cublas", "sequential_ms",
    "cublas_then_comm_ms", "ours_sequential_ms", "comm_sms", "nccl_max_ctas", "decomp2_ms", "decomp4_ms",
    "symm_mem_fused_ms", "predicted_partition", "predicted_model_ms", "predicted_groups_run",
    "predicted_sequential_ms", "tuner_overlaps", "model_params", "overlap_predicted_ms",
    "overlap_predicted_graph_ms", "best_graph_partition", "best_graph_ms", "predicted_vs_best_graph",
    "check_overlap_ms", "check_reference_ms", "tuned_ms", "best_partition", "best_ms", "no_overlap_ms",
    "finest_ms", "candidates", "predicted_vs_best", "speedup_vs_sequential", "tuned_speedup_vs_sequential",
    "overlap_efficiency", "overlap_efficiency_same_gemm", "speedup_vs_ours_sequential",
)


def _summary_row(case: _Case, comm, schedule: str, t: _Timings) -> dict:
    """One summary row, its columns in the order of :data:`SUMMARY_COLUMNS`."""
    parts = (_setup_columns(case, comm, schedule) | _baseline_columns(t.med) | _prediction_columns(case)
             | _candidate_columns(case, t) | _speedup_columns(case, t))
    assert parts.keys() == set(SUMMARY_COLUMNS), parts.keys() ^ set(SUMMARY_COLUMNS)
    return {k: parts[k] for k in SUMMARY_COLUMNS}


def _setup_columns(case: _Case, comm, schedule: str) -> dict:
    """What was measured, and where."""
    return dict(primitive=case.prim, M=case.M, N=case.N, K=case.K, world=comm.world_size, link=link_label(comm),
                waves=case.profile.num_waves, config=case.config.tile_name, schedule=schedule,
                layout=case.layout, reduction=case.reduction, copy_engine=bool(getattr(comm, "copy_engine", False)),
                comm_sms=case.comm_sms, nccl_max_ctas=getattr(comm, "max_ctas", None) or 0)


def _baseline_columns(med: dict) -> dict:
    """The GEMMs and the collective alone, and the non-overlapped baselines."""
    return dict(gemm_ms=med["gemm"], cublas_ms=med["cublas"], comm_ms=med["comm"],
                comm_over_gemm=med["comm"] / med["gemm"], comm_over_cublas=med["comm"] / med["cublas"],
                sequential_ms=med["sequential"], cublas_then_comm_ms=med["cublas_then_comm"],
                ours_sequential_ms=med["ours_sequential"], decomp2_ms=med["decomp2"], decomp4_ms=med["decomp4"],
                symm_mem_fused_ms=med.get("symm_mem_fused", float("nan")))


def _prediction_columns(case: _Case) -> dict:
    """The refined model's choice, before anything ran."""
    pred = case.predicted
    return dict(predicted_partition=str(list(pred)), predicted_model_ms=case.tuned.best.total_ms,
                # The rows layout moves wave cuts to band starts: the groups that ran.
                predicted_groups_run=(str(case.plans[pred].tables.group_tiles.tolist()) if pred in case.plans
                                      else ""),
                predicted_sequential_ms=case.tuned.no_overlap.total_ms, tuner_overlaps=_tuner_overlaps(case),
                model_params=json.dumps(case.model_params))


def _candidate_columns(case: _Case, t: _Timings) -> dict:
    """The predicted partition against the best, finest and no-overlap candidates, eager and as one
    CUDA graph, and the tuner's short check."""
    from .. import partition as P

    nan = float("nan")
    pred, best, best_g, T = case.predicted, t.best, t.best_graph, case.profile.num_waves
    return dict(overlap_predicted_ms=t.ovl.get(pred, nan), overlap_predicted_graph_ms=t.graph.get(pred, nan),
                best_graph_partition=str(list(best_g)), best_graph_ms=t.graph[best_g],
                predicted_vs_best_graph=t.graph.get(pred, nan) / t.graph[best_g],
                check_overlap_ms=t.check["overlap"], check_reference_ms=t.check["fallback"],
                best_partition=str(list(best)), best_ms=t.ovl[best], no_overlap_ms=t.ovl.get(P.no_overlap(T), nan),
                finest_ms=t.ovl.get(P.finest(T), nan), candidates=len(case.plans),
                predicted_vs_best=t.ovl.get(pred, nan) / t.ovl[best])


def _tuner_overlaps(case: _Case) -> bool:
    """Whether the tuner runs the predicted partition: only where the model says overlap wins over
    the sequential fallback (cuBLAS then the collective)."""
    return case.tuned.best.total_ms < case.tuned.no_overlap.total_ms


def _speedup_columns(case: _Case, t: _Timings) -> dict:
    """What the overlap gains over the sequential baselines, and how much of the ideal it reaches."""
    med = t.med
    t_pred = t.ovl.get(case.predicted, float("nan"))
    t_seq, t_gemm, t_comm, t_oseq = med["sequential"], med["gemm"], med["comm"], med["ours_sequential"]
    t_tuned = t_pred if _tuner_overlaps(case) else t_seq
    lower = max(min(t_gemm, med["cublas"]), t_comm)
    eff = (t_seq - t_pred) / (t_seq - lower) if t_seq > lower else float("nan")
    return dict(tuned_ms=t_tuned, speedup_vs_sequential=t_seq / t_pred, tuned_speedup_vs_sequential=t_seq / t_tuned,
                overlap_efficiency=eff,
                # The same with our own GEMM on both sides (isolates the overlap mechanism from the
                # portable kernel's speed gap to cuBLAS).
                overlap_efficiency_same_gemm=(t_oseq - t_pred) / (t_oseq - max(t_gemm, t_comm)),
                speedup_vs_ours_sequential=t_oseq / t_pred)


def _candidate_rows(case: _Case, comm, t: _Timings) -> list[dict]:
    """One row per measured partition: eager and graph times beside the model's prediction."""
    return [dict(primitive=case.prim, M=case.M, N=case.N, K=case.K, nccl_max_ctas=getattr(comm, "max_ctas", None) or 0,
                 copy_engine=bool(getattr(comm, "copy_engine", False)), partition=str(list(c)), groups=len(c),
                 groups_run=str(plan.tables.group_tiles.tolist()), measured_ms=t.ovl[c], measured_graph_ms=t.graph[c],
                 model_ms=case.model.predict(c).total_ms, sequential_ms=t.med["sequential"],
                 ours_sequential_ms=t.med["ours_sequential"])
            for c, plan in case.plans.items()]


def _progress_line(r: dict) -> str:
    """One line per case on rank 0, while the sweep runs."""
    return (f"{r['primitive']:>14} {r['M']}x{r['N']}x{r['K']} T={r['waves']} gemm {r['gemm_ms']:.3f} "
            f"cublas {r['cublas_ms']:.3f} comm {r['comm_ms']:.3f} seq {r['sequential_ms']:.3f} "
            f"ovl {r['overlap_predicted_ms']:.3f} (pred {r['predicted_partition']}) best {r['best_ms']:.3f} "
            f"{r['best_partition']} decomp {min(r['decomp2_ms'], r['decomp4_ms']):.3f} tuned {r['tuned_ms']:.3f} "
            f"({'overlap' if r['tuner_overlaps'] else 'fallback'}) eff {r['overlap_efficiency']:.2f} "
            f"eff(same GEMM) {r['overlap_efficiency_same_gemm']:.2f}")


def host_overhead(comm=None, *, world: int = 2, shapes=((2048, 4096, 1024), (4096, 8192, 4096)),
                  primitives=("all_reduce", "reduce_scatter", "all_to_all"), calls: int = 30, rounds: int = 5):
    """Host time to enqueue one overlapped call three ways, and the GPU time per call of each
    (:func:`fo_lib.testing.host_and_gpu_time`): ``per_group`` (``comm_graph=False``: a launch per
    wait and a call per collective), ``eager`` (``plan.run`` with the communication side replayed as
    one captured graph, the default) and ``graph`` (``plan.capture``: the whole call, one replay)."""
    import torch

    from .. import gemm
    from ..engine import OverlapPlan
    from ..testing import host_and_gpu_time

    if comm is None:
        from ..comm.loopback import LoopbackCommunicator
        comm = LoopbackCommunicator(world)
    sms = gemm.sm_count()
    rows = []
    for prim in primitives:
        for M, N, K in shapes:
            cfg = gemm.auto_config(M, N, K, sms)
            routing = benchmark_routing(M, N, K, comm.world_size) if prim == "all_to_all" else None
            plan = OverlapPlan(prim, M, N, K, comm, config=cfg, routing=routing)
            per_group = OverlapPlan(prim, M, N, K, comm, config=cfg, routing=routing, comm_graph=False)
            a = torch.randn(M, K, device="cuda").bfloat16()
            b = torch.randn(N, K, device="cuda").bfloat16()
            graphed = plan.capture(a, b)
            variants = {"per_group": lambda: per_group.run(a, b), "eager": lambda: plan.run(a, b), "graph": graphed}
            res = {name: host_and_gpu_time(fn, calls=calls, rounds=rounds) for name, fn in variants.items()}
            plan.check()
            per_group.check()
            rows.append(dict(primitive=prim, M=M, N=N, K=K, groups=plan.num_groups, link=link_label(comm),
                             comm_graph=plan.comm_graph_active,
                             **{f"{v}_host_us": res[v][0] for v in variants}, **{f"{v}_ms": res[v][1] for v in variants}))
    return pd.DataFrame(rows)


def write_records(summary, cands, saved, out_csv, *, world: int, comm_sms: int, link: str = LINK, **meta):
    """The three records of one measurement: ``<out>.csv``, ``<out>_candidates.csv`` (each with a
    provenance sidecar) and ``<out>_profiles.json`` (+ sidecar)."""
    from pathlib import Path

    from ..provenance import write_result

    out = Path(out_csv)
    write_result(summary, out, world_size=world, link=link, comm_sms=comm_sms, **meta)
    write_result(cands, out.with_name(out.stem + "_candidates.csv"), world_size=world, link=link,
                 comm_sms=comm_sms, **meta)
    profiles = out.with_name(out.stem + "_profiles.json")
    profiles.write_text(json.dumps(saved, indent=1) + "\n")
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    profiles.with_suffix(".meta.json").write_text(json.dumps(meta | {"note": "GEMM profiles and link curves"}, indent=1) + "\n")
    return out
