"""The overlap sweep's records of one case: the summary row (:data:`SUMMARY_COLUMNS`, one section
per measured quantity), one row per measured partition, and the progress line."""
from __future__ import annotations

import json

from ..measure_common import link_label
from .cases import _Case, _Timings

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
    from ... import partition as P

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
