"""One (primitive, shape) of the overlap sweep: its GEMM profile, link curve, the model's choice and a
plan per candidate partition (:func:`_case`), every timed variant (:func:`_variants`: the GEMMs and
the collective alone, the non-overlapped baselines, each candidate eager and as one CUDA graph) and
their medians (:func:`_timings`). The ablation measures with the same pieces."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..measure_common import _agree, benchmark_routing, full_collective, measured_profile


def candidate_partitions(T: int, predicted, rng, limit: int):
    """Partitions to time: all of them when few, else the predicted, finest, no-overlap and random ones."""
    from ... import partition as P

    if P.count_partitions(T) <= limit:
        return list(P.compositions(T))
    cands = {tuple(predicted), P.finest(T), P.no_overlap(T)}
    while len(cands) < limit:  # random compositions: each gap cut with probability 1/2
        cands.add(P.from_cuts(rng.random(T - 1) < rng.uniform(0.1, 0.9)))
    return sorted(cands)


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

    from ... import gemm, partition_tuning
    from ...engine import OverlapPlan, group_collective, layout_config
    from ...predictor import OverlapModel

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
        curves[prim] = _agree(comm, partition_tuning.measure_curve(comm, group_collective(prim, plan_reduction),
                                                                   partition_tuning.default_sizes(2 * 8192 * 16384)))
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

    from ... import baselines, gemm

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
    from ... import partition_tuning
    from ...testing import bench_interleaved, summarize

    med = partition_tuning.slowest_rank(comm, summarize(bench_interleaved(fns, rounds=rounds, inner=inner, warmup=1)))
    # The check a tuner can afford before it commits: one short round of the predicted partition (a
    # graph replay where there is one) against cuBLAS then the collective, separate from the rounds
    # reported above, so that deciding on it does not pick noise.
    pred = list(case.predicted)
    pred_fn = fns.get(f"graph:{pred}", fns[f"ovl:{pred}"])
    check = partition_tuning.OverlapCheck(rounds=3, inner=inner).timings(
        comm, lambda: pred_fn(0), lambda: fns["cublas_then_comm"](0))
    for plan in case.plans.values():
        plan.check()
    nan = float("nan")
    return _Timings(med, {c: med[f"ovl:{list(c)}"] for c in case.plans},
                    {c: med.get(f"graph:{list(c)}", nan) for c in case.plans}, check)
