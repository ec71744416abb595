"""The overlap sweep (GPU): per (primitive, shape), every candidate partition's overlapped call
(eager and as one CUDA graph) beside the non-overlapped baselines and the refined model's
prediction."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..measure_common import QUICK_SHAPES, SHAPES
from .cases import _case, _timings, _variants
from .summary import _candidate_rows, _progress_line, _summary_row


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

    from ... import gemm

    if comm is None:
        from ...comm.loopback import LoopbackCommunicator
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
