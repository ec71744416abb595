"""Partition design space, predictive search and speedups, from the overlap benchmark's records.

Measuring these needs ``scripts/bench_overlap.py`` on a GPU (one call writes all three files);
here they are loaded and summarised. The search-time comparison runs live (CPU only).
"""
from __future__ import annotations

import ast
import dataclasses
import json
import time

import numpy as np
import pandas as pd

from .common import load

PAPER = {"finest_best_share": 0.04, "finest_mean_loss": 0.1734, "predictor_error": 0.0341,
         "chosen_of_best": 0.99, "speedup_4090": 1.65, "speedup_a800": 1.30}


def record_name(data_set: str) -> str:
    """The overlap benchmark's record in a data set: ``overlap_nccl`` (measured on several GPUs) or
    ``overlap_loopback`` (one GPU, emulated link)."""
    from ..provenance import DATA_DIR
    return "overlap_nccl" if (DATA_DIR / data_set / "overlap_nccl.csv").exists() else "overlap_loopback"


def speedups(data_set: str = "h200"):
    return load(data_set, record_name(data_set))


def candidates(data_set: str = "h200"):
    df, meta = load(data_set, record_name(data_set) + "_candidates")
    df["part"] = df.partition.map(lambda s: tuple(ast.literal_eval(s)))
    df["waves"] = df.part.map(sum)
    df["shape"] = df.M.astype(str) + "x" + df.N.astype(str) + "x" + df.K.astype(str)
    if "nccl_max_ctas" in df and df.nccl_max_ctas.nunique() > 1:  # one sweep per NCCL CTA budget
        df["shape"] += " @" + df.nccl_max_ctas.astype(str) + " CTAs"
    return df, meta


def profiles_and_curves(data_dir, record: str) -> tuple[dict, dict]:
    """The GEMM profiles and link curves a sweep recorded in ``<data_dir>/<record>_profiles.json``:
    ``{(budget, primitive, M, N, K): GemmProfile}`` and ``{(budget, primitive): BandwidthCurve}``.
    A record without NCCL CTA budgets (one GPU) counts as budget 0; the copy-engine sweep of
    ``bench_nccl.py --copy-engine`` has the budget ``"copy_engine"`` (see :func:`budget_key`)."""
    from pathlib import Path

    from ..profiles import BandwidthCurve, GemmProfile

    saved = json.loads((Path(data_dir) / f"{record}_profiles.json").read_text())
    per_budget = saved if "curves" not in saved else {"0": saved}
    profiles, curves = {}, {}
    for budget, sv in per_budget.items():
        budget = int(budget) if budget.lstrip("-").isdigit() else budget
        for k, v in sv["curves"].items():
            curves[(budget, k)] = BandwidthCurve.from_dict(v)
        for d in sv["profiles"]:
            d = dict(d)
            prim = d.pop("primitive")
            profiles[(budget, prim, d["M"], d["N"], d["K"])] = GemmProfile.from_dict(d)
    return profiles, curves


def budget_key(row) -> int | str:
    """The key of a sweep row's profiles in :func:`profiles_and_curves`: its NCCL CTA budget, or
    ``"copy_engine"`` for a row of the copy-engine sweep (``copy_engine`` column true)."""
    ce = getattr(row, "copy_engine", False)  # NaN in rows of records made before the column existed
    return "copy_engine" if isinstance(ce, (bool, np.bool_)) and ce else int(row.nccl_max_ctas)


def finest_statistic(df: pd.DataFrame, measured: str = "measured_ms") -> pd.DataFrame:
    """Per shape: is the finest partition (one wave per group) the best measured, and its loss.
    ``measured``: the column to compare (``measured_graph_ms``: the CUDA-graph replays)."""
    rows = []
    for (prim, shape), g in df.dropna(subset=[measured]).groupby(["primitive", "shape"]):
        T = int(g.waves.iloc[0])
        finest = g[g.part == (1,) * T]
        if finest.empty:
            continue
        best = g[measured].min()
        rows.append(dict(primitive=prim, shape=shape, waves=T, candidates=len(g),
                         finest_is_best=bool(finest[measured].iloc[0] <= best * 1.0001),
                         finest_loss=float(finest[measured].iloc[0] / best - 1)))
    return pd.DataFrame(rows)


def predictor_accuracy(df: pd.DataFrame, measured: str = "measured_ms") -> pd.DataFrame:
    """Per shape: mean |predicted - measured| / measured over all candidates, and how the
    partition the model ranks first among the measured ones compares with the best measured.
    ``measured``: the column to compare with (``measured_graph_ms``: the CUDA-graph replays)."""
    rows = []
    for (prim, shape), g in df.dropna(subset=[measured]).groupby(["primitive", "shape"]):
        chosen = g.loc[g.model_ms.idxmin()]
        meas = g[measured]
        rows.append(dict(primitive=prim, shape=shape, candidates=len(g),
                         mean_error=float((abs(g.model_ms - meas) / meas).mean()),
                         chosen=str(list(chosen.part)), chosen_of_best=float(meas.min() / chosen[measured])))
    return pd.DataFrame(rows)


def search_time(waves=(4, 8, 12, 14, 16, 64, 128, 200), brute_force_limit: int = 16, repeats: int = 3) -> pd.DataFrame:
    """Wall time of the exact DP vs enumerating every partition (live, CPU)."""
    from .. import partition as P
    from ..predictor import synthetic_model
    from ..profiles import BandwidthCurve

    sizes = np.logspace(3, 10, 29)
    curve = BandwidthCurve(tuple((float(b), 0.015 + b / 150e6) for b in sizes))
    rows = []
    for T in waves:
        m = synthetic_model(T, 0.05, 4_000_000, curve, "refined")
        t0 = time.perf_counter()
        for _ in range(repeats):
            m.tune()
        dp = (time.perf_counter() - t0) / repeats * 1e3
        bf = float("nan")
        if T <= brute_force_limit:
            t0 = time.perf_counter()
            P.brute_force(m._wave_ends, m.comm_ms)
            bf = (time.perf_counter() - t0) * 1e3
        rows.append(dict(waves=T, candidates=2 ** (T - 1), dp_ms=dp, brute_force_ms=bf))
    return pd.DataFrame(rows)


# --- measurement (GPU): the overlap benchmark ------------------------------------------------------
SHAPES = [(2048, 8192, 8192), (4096, 8192, 8192), (4096, 8192, 16384), (8192, 8192, 8192),
          (8192, 8192, 16384), (2048, 8192, 16384)]

# The paper's evaluation shapes on non-A800 GPUs (artifact tune/preparation.py): AllReduce and
# ReduceScatter M in {2048, 3072, 4096, 8192} x N 8192 x K in {8192, 16384}; All-to-All M in
# {512, 1024, 2048, 2560} x 8192 x {8192, 16384}. Plus Llama-3-70B at TP=8 (hidden 8192, MLP 28672):
# the attention output projection (K = 8192/8) and the MLP down projection (K = 28672/8) for 4k/8k/16k
# tokens (rows of the GEMM on each rank).
PAPER_SHAPES = {
    "all_reduce": [(m, 8192, k) for m in (2048, 3072, 4096, 8192) for k in (8192, 16384)],
    "reduce_scatter": [(m, 8192, k) for m in (2048, 3072, 4096, 8192) for k in (8192, 16384)],
    "all_to_all": [(m, 8192, k) for m in (512, 1024, 2048, 2560) for k in (8192, 16384)],
}
LLAMA70B_TP8_SHAPES = [(t, 8192, k) for t in (4096, 8192, 16384) for k in (1024, 3584)]
QUICK_SHAPES = [(2048, 8192, 8192), (4096, 8192, 8192), (4096, 8192, 16384)]


def candidate_partitions(T: int, predicted, rng, limit: int):
    """Partitions to time: all of them when few, else the predicted, finest, no-overlap and random ones."""
    from .. import partition as P

    if P.count_partitions(T) <= limit:
        return list(P.compositions(T))
    cands = {tuple(predicted), P.finest(T), P.no_overlap(T)}
    while len(cands) < limit:  # random compositions: each gap cut with probability 1/2
        cands.add(P.from_cuts(rng.random(T - 1) < rng.uniform(0.1, 0.9)))
    return sorted(cands)


def _agree(comm, obj):
    """Rank 0's ``obj`` on every rank (a single-process link has nothing to agree on)."""
    bcast = getattr(comm, "broadcast_object", None)
    return obj if bcast is None else bcast(obj)


def benchmark_routing(M: int, N: int, K: int, world: int):
    """The All-to-All routing of the benchmarks: destinations drawn with Dirichlet(2) skew, seeded by
    the shape, so that every rank and every run sees the same one."""
    from ..engine import Routing

    rng = np.random.default_rng([M, N, K, world])
    dest = rng.choice(world, size=M, p=rng.dirichlet(np.full(world, 2.0)))
    return Routing.from_destinations([dest] * world)


def routed_profile(profile, config, ctas: int, routing):
    """``profile`` with the bytes per wave an All-to-All with ``routing`` really moves (a skewed
    routing moves more off-rank than the output size suggests)."""
    from .. import tuning

    return dataclasses.replace(profile, wave_bytes=tuning.all_to_all_wave_bytes(config.grid(profile.M, profile.N, ctas),
                                                                                 routing))


def measured_profile(comm, M: int, N: int, K: int, config, ctas: int, routing=None):
    """The GEMM profile on ``ctas`` CTAs (an All-to-All's bytes per wave from ``routing``), rank 0's
    on every rank."""
    from .. import tuning

    profile = tuning.measure_gemm_profile(M, N, K, config=config, ctas=ctas)
    return _agree(comm, profile if routing is None else routed_profile(profile, config, ctas, routing))


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


def link_label(comm) -> str:
    if comm.link == "emulated":
        return LINK
    return f"{comm.link.upper() if comm.link == 'nccl' else comm.link} ({comm.world_size} GPUs)"


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
    refined model's parameters, e.g. fitted by ``scripts/calibrate_overlap.py`` on an earlier run.
    ``graphs``: also time every candidate replayed as one CUDA graph (``OverlapPlan.capture``), the
    mode without host work per group. ``schedule``: the GEMM's CTA schedule
    (:class:`fo_lib.engine.OverlapPlan`; ``"per_tile"`` ignores ``comm_sms``). ``layout``: the
    AllReduce plans' layout (``"rows"``: groups of whole tile rows, the GEMM in a row-major raster,
    no post-reorder; the other primitives keep ``"tiles"``). ``reduction``: the AllReduce plans'
    (``"post_reorder"``: an in-place AllGather per group, summed by the post-reorder; the model then
    uses the AllGather's curve). ``baseline_comm``: the communicator of the non-overlapped
    baselines' collectives (``comm_ms``, ``cublas_then_comm_ms``, ``ours_sequential_ms``; default
    ``comm``), e.g. NCCL's default communicator when ``comm`` is a copy-engine one.

    Returns ``(summary, candidates, saved)``: one row per (primitive, shape), one row per measured
    partition, and the GEMM profiles and link curves as JSON-ready dicts.
    """
    import torch
    from tqdm import tqdm

    from .. import baselines, gemm, partition as P, tuning
    from ..engine import OverlapPlan, group_collective, layout_config
    from ..predictor import OverlapModel
    from ..testing import bench_interleaved, summarize

    if comm is None:
        from ..comm.loopback import LoopbackCommunicator
        comm = LoopbackCommunicator(world)
    world, root = comm.world_size, comm.rank == 0
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
    rows, cand_rows = [], []
    curves = {}
    saved = {"profiles": [], "curves": {}}
    for prim in primitives:
        for M, N, K in tqdm(per_prim.get(prim, []), desc=prim, disable=not root):
            plan_layout = layout if prim == "all_reduce" else "tiles"
            plan_reduction = reduction if prim == "all_reduce" else "collective"
            cfg = layout_config(gemm.auto_config(M, N, K, sms), plan_layout)
            run_gemm = gemm.kernels_for(cfg)
            a = torch.randn(M, K, device="cuda").bfloat16()
            b = torch.randn(N, K, device="cuda").bfloat16()
            routing = benchmark_routing(M, N, K, world) if prim == "all_to_all" else None
            ctas = sms - sms_free[prim] if schedule == "persistent" else sms
            profile = measured_profile(comm, M, N, K, cfg, ctas, routing)
            if prim not in curves:
                curves[prim] = _agree(comm, tuning.measure_curve(comm, group_collective(prim, plan_reduction),
                                                                 tuning.default_sizes(2 * 8192 * 16384)))
            model = OverlapModel(profile, curves[prim], "refined", **((model_kw or {}).get(prim) or {"launch_ms": 0.01}))
            res = model.tune()
            T = profile.num_waves
            cands = candidate_partitions(T, res.best.partition, rng, candidates_limit)
            plans = {c: OverlapPlan(prim, M, N, K, comm, config=cfg, ctas=ctas, partition=c, routing=routing,
                                    schedule=schedule, layout=plan_layout, reduction=plan_reduction)
                     for c in cands}
            any_plan = plans[cands[0]]
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            full = torch.randn(M * N, device="cuda").bfloat16()
            # All-to-All moves what the routing sends, not equal splits (a skewed routing moves more
            # off-rank from the rank that keeps the fewest rows).
            split = None if routing is None else (np.bincount(routing.dest[comm.rank], minlength=world) * N).tolist()
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
            for c, plan in plans.items():
                fns[f"ovl:{list(c)}"] = (lambda p: lambda i: p.run(a, b))(plan)
            if graphs:  # every candidate also replayed as one CUDA graph (no host work per group)
                try:
                    for c, plan in plans.items():
                        fns[f"graph:{list(c)}"] = (lambda g: lambda i: g())(plan.capture(a, b))
                except Exception as exc:  # noqa: BLE001 - a link that cannot be captured: record and go on
                    fns = {k: v for k, v in fns.items() if not k.startswith("graph:")}
                    if root:
                        tqdm.write(f"CUDA-graph capture failed: {type(exc).__name__}: {exc}")
            med = tuning.slowest_rank(comm, summarize(bench_interleaved(fns, rounds=rounds, inner=inner, warmup=1)))
            pred_c = tuple(res.best.partition)
            # The check a tuner can afford before it commits: one short round of the predicted
            # partition (a graph replay where there is one) against cuBLAS then the collective,
            # separate from the rounds reported above, so that deciding on it does not pick noise.
            pred_fn = fns.get(f"graph:{list(pred_c)}", fns[f"ovl:{list(pred_c)}"])
            check = tuning.OverlapCheck(rounds=3, inner=inner).timings(
                comm, lambda: pred_fn(0), lambda: fns["cublas_then_comm"](0))
            for plan in plans.values():
                plan.check()
            ovl = {c: med[f"ovl:{list(c)}"] for c in cands}
            best_c = min(ovl, key=ovl.get)
            nan = float("nan")
            ovl_graph = {c: med.get(f"graph:{list(c)}", nan) for c in cands}
            best_gc = min(ovl_graph, key=lambda c: ovl_graph[c] if ovl_graph[c] == ovl_graph[c] else float("inf"))
            t_pred = ovl.get(pred_c, float("nan"))
            t_seq, t_gemm, t_comm = med["sequential"], med["gemm"], med["comm"]
            # What the tuner runs: the predicted partition where the model says overlap wins over the
            # sequential fallback (cuBLAS then the collective), else the fallback itself.
            overlap_chosen = res.best.total_ms < res.no_overlap.total_ms
            t_tuned = t_pred if overlap_chosen else t_seq
            lower = max(min(t_gemm, med["cublas"]), t_comm)
            eff = (t_seq - t_pred) / (t_seq - lower) if t_seq > lower else float("nan")
            # The same with our own GEMM on both sides (isolates the overlap mechanism from the
            # portable kernel's speed gap to cuBLAS).
            t_oseq = med["ours_sequential"]
            eff_ours = (t_oseq - t_pred) / (t_oseq - max(t_gemm, t_comm))
            row = dict(primitive=prim, M=M, N=N, K=K, world=world, link=link_label(comm),
                       waves=T, config=cfg.tile_name, schedule=schedule, layout=plan_layout,
                       reduction=plan_reduction, copy_engine=bool(getattr(comm, "copy_engine", False)), gemm_ms=t_gemm, cublas_ms=med["cublas"], comm_ms=t_comm,
                       comm_over_gemm=t_comm / t_gemm, comm_over_cublas=t_comm / med["cublas"],
                       sequential_ms=t_seq, cublas_then_comm_ms=med["cublas_then_comm"], ours_sequential_ms=t_oseq, comm_sms=sms_free[prim],
                       nccl_max_ctas=getattr(comm, "max_ctas", None) or 0, decomp2_ms=med["decomp2"],
                       decomp4_ms=med["decomp4"], symm_mem_fused_ms=med.get("symm_mem_fused", float("nan")),
                       predicted_partition=str(list(pred_c)), predicted_model_ms=res.best.total_ms,
                       # The rows layout moves wave cuts to band starts: the groups that ran.
                       predicted_groups_run=(str(plans[pred_c].tables.group_tiles.tolist()) if pred_c in plans
                                             else ""),
                       predicted_sequential_ms=res.no_overlap.total_ms, tuner_overlaps=overlap_chosen,
                       model_params=json.dumps((model_kw or {}).get(prim) or {"launch_ms": 0.01}),
                       overlap_predicted_ms=t_pred, overlap_predicted_graph_ms=ovl_graph.get(pred_c, nan),
                       best_graph_partition=str(list(best_gc)), best_graph_ms=ovl_graph[best_gc],
                       predicted_vs_best_graph=ovl_graph.get(pred_c, nan) / ovl_graph[best_gc],
                       check_overlap_ms=check["overlap"], check_reference_ms=check["fallback"],
                       tuned_ms=t_tuned, best_partition=str(list(best_c)), best_ms=ovl[best_c],
                       no_overlap_ms=ovl.get(P.no_overlap(T), float("nan")),
                       finest_ms=ovl.get(P.finest(T), float("nan")), candidates=len(cands),
                       predicted_vs_best=t_pred / ovl[best_c], speedup_vs_sequential=t_seq / t_pred,
                       tuned_speedup_vs_sequential=t_seq / t_tuned,
                       overlap_efficiency=eff, overlap_efficiency_same_gemm=eff_ours,
                       speedup_vs_ours_sequential=t_oseq / t_pred)
            rows.append(row)
            for c in cands:
                cand_rows.append(dict(primitive=prim, M=M, N=N, K=K, nccl_max_ctas=getattr(comm, "max_ctas", None) or 0,
                                      copy_engine=bool(getattr(comm, "copy_engine", False)),
                                      partition=str(list(c)), groups=len(c),
                                      groups_run=str(plans[c].tables.group_tiles.tolist()),
                                      measured_ms=ovl[c], measured_graph_ms=ovl_graph[c], model_ms=model.predict(c).total_ms,
                                      sequential_ms=t_seq, ours_sequential_ms=t_oseq))
            saved["profiles"].append(profile.to_dict() | {"primitive": prim})
            if root:
                tqdm.write(f"{prim:>14} {M}x{N}x{K} T={T} gemm {t_gemm:.3f} cublas {med['cublas']:.3f} comm {t_comm:.3f} "
                           f"seq {t_seq:.3f} ovl {t_pred:.3f} (pred {list(pred_c)}) best {ovl[best_c]:.3f} {list(best_c)} "
                           f"decomp {min(med['decomp2'], med['decomp4']):.3f} tuned {t_tuned:.3f} "
                           f"({'overlap' if overlap_chosen else 'fallback'}) eff {eff:.2f} eff(same GEMM) {eff_ours:.2f}")
            plans.clear()
            torch.cuda.empty_cache()
    saved["curves"] = {k: v.to_dict() for k, v in curves.items()}
    return pd.DataFrame(rows), pd.DataFrame(cand_rows), saved


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


def full_collective(comm, prim, buf, recv, split=None):
    """The collective over the whole GEMM output (the sequential baseline's communication); for
    All-to-All ``split`` is what this rank sends to each rank (default equal parts). Every rank routes
    alike here (the benchmark's routing is the same on all ranks), so each rank receives
    ``split[rank]`` from every source."""
    W, n = comm.world_size, buf.numel()
    if prim == "all_reduce":
        comm.all_reduce(buf)
    elif prim == "reduce_scatter":
        comm.reduce_scatter(buf, recv[:n // W])
    else:
        split = split or [n // W] * W
        mine = split[comm.rank]
        comm.all_to_all(buf[:sum(split)], split, recv[:W * mine], [mine] * W)


LINK = "emulated (loopback, copy engine)"


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


def run(mode: str = "auto", data_set: str = "h200", quick: bool = False) -> str:
    """Measure and record the overlap benchmark (GPU) or keep the recorded one; returns the data set
    the loaders above should read."""
    from .common import measured_set, resolve_mode
    from ..provenance import DATA_DIR

    if resolve_mode(mode) != "measure":
        return data_set
    summary, cands, saved = measure(quick=quick)
    tag = measured_set(quick)
    write_records(summary, cands, saved, DATA_DIR / tag / "overlap_loopback.csv", world=2, comm_sms=4)
    return tag
