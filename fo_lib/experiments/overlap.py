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

from . import load

PAPER = {"finest_best_share": 0.04, "finest_mean_loss": 0.1734, "predictor_error": 0.0341,
         "chosen_of_best": 0.99, "speedup_4090": 1.65, "speedup_a800": 1.30}


def speedups(data_set: str = "h200"):
    return load(data_set, "overlap_loopback")


def candidates(data_set: str = "h200"):
    df, meta = load(data_set, "overlap_loopback_candidates")
    df["part"] = df.partition.map(lambda s: tuple(ast.literal_eval(s)))
    df["waves"] = df.part.map(sum)
    df["shape"] = df.M.astype(str) + "x" + df.N.astype(str) + "x" + df.K.astype(str)
    return df, meta


def finest_statistic(df: pd.DataFrame) -> pd.DataFrame:
    """Per shape: is the finest partition (one wave per group) the best measured, and its loss."""
    rows = []
    for (prim, shape), g in df.groupby(["primitive", "shape"]):
        T = int(g.waves.iloc[0])
        finest = g[g.part == (1,) * T]
        if finest.empty:
            continue
        best = g.measured_ms.min()
        rows.append(dict(primitive=prim, shape=shape, waves=T, candidates=len(g),
                         finest_is_best=bool(finest.measured_ms.iloc[0] <= best * 1.0001),
                         finest_loss=float(finest.measured_ms.iloc[0] / best - 1)))
    return pd.DataFrame(rows)


def predictor_accuracy(df: pd.DataFrame) -> pd.DataFrame:
    """Per shape: mean |predicted - measured| / measured over all candidates, and how the
    partition the model ranks first among the measured ones compares with the best measured."""
    rows = []
    for (prim, shape), g in df.groupby(["primitive", "shape"]):
        chosen = g.loc[g.model_ms.idxmin()]
        rows.append(dict(primitive=prim, shape=shape, candidates=len(g),
                         mean_error=float((abs(g.model_ms - g.measured_ms) / g.measured_ms).mean()),
                         chosen=str(list(chosen.part)), chosen_of_best=float(g.measured_ms.min() / chosen.measured_ms)))
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


def candidate_partitions(T: int, predicted, rng, limit: int):
    """Partitions to time: all of them when few, else the predicted, finest, no-overlap and random ones."""
    from .. import partition as P

    if P.count_partitions(T) <= limit:
        return list(P.compositions(T))
    cands = {tuple(predicted), P.finest(T), P.no_overlap(T)}
    while len(cands) < limit:  # random compositions: each gap cut with probability 1/2
        cands.add(P.from_cuts(rng.random(T - 1) < rng.uniform(0.1, 0.9)))
    return sorted(cands)


def measure(*, world: int = 2, quick: bool = False, primitives=("all_reduce", "reduce_scatter", "all_to_all"),
            candidates_limit: int = 12, comm_sms: int = 4, shapes=None):
    """Overlapped vs sequential vs decomposition on one GPU over the loopback (emulated) link, and every
    candidate partition's latency next to the refined model's prediction.

    Returns ``(summary, candidates, saved)``: one row per (primitive, shape), one row per measured
    partition, and the GEMM profiles and link curves as JSON-ready dicts.
    """
    import torch
    from tqdm import tqdm

    from .. import baselines, gemm, partition as P, tuning
    from ..comm.loopback import LoopbackCommunicator
    from ..engine import OverlapPlan, Routing
    from ..predictor import OverlapModel
    from ..testing import bench_interleaved, summarize

    shapes = shapes or (SHAPES[:3] if quick else SHAPES)
    rounds, inner = (4, 2) if quick else (6, 3)
    comm = LoopbackCommunicator(world)
    sms = gemm.sm_count()
    rng = np.random.default_rng(0)
    rows, cand_rows = [], []
    curves = {}
    saved = {"profiles": [], "curves": {}}
    for prim in primitives:
        for M, N, K in tqdm(shapes, desc=prim):
            cfg = gemm.default_config(M, N, K, sms)
            a = torch.randn(M, K, device="cuda").bfloat16()
            b = torch.randn(N, K, device="cuda").bfloat16()
            routing = None
            if prim == "all_to_all":
                dest = rng.choice(world, size=M, p=rng.dirichlet(np.full(world, 2.0)))
                routing = Routing.from_destinations([dest] * world)
            ctas = sms - comm_sms
            profile = tuning.measure_gemm_profile(M, N, K, config=cfg, ctas=ctas)
            if prim == "all_to_all":  # what a skewed All-to-All moves, not the output size
                grid = cfg.grid(M, N, ctas)
                profile = dataclasses.replace(profile, wave_bytes=tuning.all_to_all_wave_bytes(grid, routing))
            if prim not in curves:
                curves[prim] = tuning.measure_curve(comm, prim, tuning.default_sizes(2 * 8192 * 8192))
            model = OverlapModel(profile, curves[prim], "refined", launch_ms=0.01)
            res = model.tune()
            T = profile.num_waves
            cands = candidate_partitions(T, res.best.partition, rng, candidates_limit)
            plans = {c: OverlapPlan(prim, M, N, K, comm, config=cfg, ctas=ctas, partition=c, routing=routing)
                     for c in cands}
            any_plan = plans[cands[0]]
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            full = torch.randn(M * N, device="cuda").bfloat16()
            recv_full = torch.empty(M * N, dtype=torch.bfloat16, device="cuda")
            fns = {
                "gemm": lambda i: gemm.gemm_nt(a, b, out, config=cfg),
                "comm": lambda i: full_collective(comm, prim, full, recv_full),
                "sequential": lambda i: baselines.sequential(any_plan, a, b),
                "ours_sequential": lambda i: (gemm.gemm_nt(a, b, out, config=cfg),
                                              full_collective(comm, prim, full, recv_full)),
                "decomp2": lambda i: baselines.decomposition(any_plan, a, b, chunks=2),
                "decomp4": lambda i: baselines.decomposition(any_plan, a, b, chunks=4),
            }
            for c, plan in plans.items():
                fns[f"ovl:{list(c)}"] = (lambda p: lambda i: p.run(a, b))(plan)
            med = summarize(bench_interleaved(fns, rounds=rounds, inner=inner, warmup=1))
            for plan in plans.values():
                plan.check()
            ovl = {c: med[f"ovl:{list(c)}"] for c in cands}
            best_c = min(ovl, key=ovl.get)
            pred_c = tuple(res.choice.partition)
            t_pred = ovl.get(pred_c, float("nan"))
            t_seq, t_gemm, t_comm = med["sequential"], med["gemm"], med["comm"]
            eff = (t_seq - t_pred) / (t_seq - max(t_gemm, t_comm)) if t_seq > max(t_gemm, t_comm) else float("nan")
            # The same with our own GEMM on both sides (isolates the overlap mechanism from the
            # portable kernel's speed gap to cuBLAS).
            t_oseq = med["ours_sequential"]
            eff_ours = (t_oseq - t_pred) / (t_oseq - max(t_gemm, t_comm))
            row = dict(primitive=prim, M=M, N=N, K=K, world=world, link="emulated (loopback, copy engine)",
                       waves=T, config=cfg.tile_name, gemm_ms=t_gemm, comm_ms=t_comm, comm_over_gemm=t_comm / t_gemm,
                       sequential_ms=t_seq, ours_sequential_ms=t_oseq, comm_sms=comm_sms, decomp2_ms=med["decomp2"], decomp4_ms=med["decomp4"],
                       predicted_partition=str(list(pred_c)), predicted_model_ms=res.choice.total_ms,
                       overlap_predicted_ms=t_pred, best_partition=str(list(best_c)), best_ms=ovl[best_c],
                       no_overlap_ms=ovl.get(P.no_overlap(T), float("nan")),
                       finest_ms=ovl.get(P.finest(T), float("nan")), candidates=len(cands),
                       predicted_vs_best=t_pred / ovl[best_c], speedup_vs_sequential=t_seq / t_pred,
                       overlap_efficiency=eff, overlap_efficiency_same_gemm=eff_ours,
                       speedup_vs_ours_sequential=t_oseq / t_pred)
            rows.append(row)
            for c in cands:
                cand_rows.append(dict(primitive=prim, M=M, N=N, K=K, partition=str(list(c)), groups=len(c),
                                      measured_ms=ovl[c], model_ms=model.predict(c).total_ms,
                                      sequential_ms=t_seq, ours_sequential_ms=t_oseq))
            saved["profiles"].append(profile.to_dict() | {"primitive": prim})
            tqdm.write(f"{prim:>14} {M}x{N}x{K} T={T} gemm {t_gemm:.3f} comm {t_comm:.3f} seq {t_seq:.3f} "
                       f"ovl {t_pred:.3f} (pred {list(pred_c)}) best {ovl[best_c]:.3f} {list(best_c)} "
                       f"decomp {min(med['decomp2'], med['decomp4']):.3f} eff {eff:.2f} ours-seq {t_oseq:.3f} eff(same GEMM) {eff_ours:.2f}")
            plans.clear()
            torch.cuda.empty_cache()
    saved["curves"] = {k: v.to_dict() for k, v in curves.items()}
    return pd.DataFrame(rows), pd.DataFrame(cand_rows), saved


def full_collective(comm, prim, buf, recv):
    """The collective over the whole GEMM output (the sequential baseline's communication)."""
    W, n = comm.world_size, buf.numel()
    if prim == "all_reduce":
        comm.all_reduce(buf)
    elif prim == "reduce_scatter":
        comm.reduce_scatter(buf, recv[:n // W])
    else:
        comm.all_to_all(buf, [n // W] * W, recv, [n // W] * W)


LINK = "emulated (loopback, copy engine)"


def write_records(summary, cands, saved, out_csv, *, world: int, comm_sms: int):
    """The three records of one measurement: ``<out>.csv``, ``<out>_candidates.csv`` (each with a
    provenance sidecar) and ``<out>_profiles.json`` (+ sidecar)."""
    from pathlib import Path

    from ..provenance import write_result

    out = Path(out_csv)
    write_result(summary, out, world_size=world, link=LINK, comm_sms=comm_sms)
    write_result(cands, out.with_name(out.stem + "_candidates.csv"), world_size=world, link=LINK, comm_sms=comm_sms)
    profiles = out.with_name(out.stem + "_profiles.json")
    profiles.write_text(json.dumps(saved, indent=1) + "\n")
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    profiles.with_suffix(".meta.json").write_text(json.dumps(meta | {"note": "GEMM profiles and link curves"}, indent=1) + "\n")
    return out


def run(mode: str = "auto", data_set: str = "h200", quick: bool = False) -> str:
    """Measure and record the overlap benchmark (GPU) or keep the recorded one; returns the data set
    the loaders above should read."""
    from . import resolve_mode
    from ..provenance import DATA_DIR, gpu_tag

    if resolve_mode(mode) != "measure":
        return data_set
    summary, cands, saved = measure(quick=quick)
    tag = gpu_tag()
    write_records(summary, cands, saved, DATA_DIR / tag / "overlap_loopback.csv", world=2, comm_sms=4)
    return tag
