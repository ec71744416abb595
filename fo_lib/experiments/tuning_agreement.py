"""Does autotuning pick what the LLM benchmark measures as fastest?

Each shape of :data:`fo_lib.experiments.gemm_llm.SHAPES` gets its tuning shortlist
(:func:`fo_lib.gemm.sm90.config_tuning.tuning_candidates`), timed two ways in one process:

* ``tune_ms``: as autotuning times them (:func:`fo_lib.gemm.sm90.launch.time_candidates`: copies of
  one operand set, its own rounds);
* ``graph_ms``: as the benchmark does (:func:`fo_lib.experiments.kernel_bench.check_and_time`:
  CUDA-graph replays of back-to-back calls, inputs rotated beyond the L2, interleaved rounds).

:func:`summary` says per shape what autotuning's pick costs in the benchmark's regime against the
benchmark's own best. Why: when autotuning timed
each call alone after an L2 flush, or back to back without a graph, its picks cost up to 5 % in the
benchmark (docs/decisions.md, "Autotuning times the shortlist as the LLM benchmark times"), the size
of the bar's remaining gap. Now that both regimes are graph replays, what is left of ``pick_loss``
is the two measurements' noise and their operand data.
"""
from __future__ import annotations

import pandas as pd

from ..gemm import config_tuning, sm90, tile_table
from .gemm_llm import SHAPES

COLUMNS = ("M", "N", "K", "config", "model", "tune_ms", "graph_ms", "handicap")


def candidates(M: int, N: int, K: int, sms: int) -> tuple[list, object]:
    """``(shortlist, model)``: what autotuning times for ``M x N x K`` on ``sms`` CTAs with the
    current tile table, and the table's own pick (which autotuning keeps unless another beats it by
    ``config_tuning.WIN``)."""
    path = tile_table.table_path()
    if path is None:
        raise sm90.GemmError("no tile table for this GPU (FO_SM90_TILES or data/<gpu>/gemm_sm90_tiles.csv)")
    model = sm90.default_config(M, N, K, sms)
    return sm90.tuning_candidates(path, M, N, K, sms, model), model


def measure(rounds: int = 10, inner: int = 3, seed: int = 0, only=None, on_shape=None) -> list[dict]:
    """One row per (shape, candidate) on this GPU, bf16 (``only``: indices into SHAPES): ``tune_ms``
    with autotuning's own rounds (``config_tuning.ROUNDS``), ``graph_ms`` with ``rounds`` x ``inner``;
    ``on_shape(rows)`` after each shape."""
    import torch

    from .kernel_bench import check_and_time, input_sets

    sms = sm90.sm_count()
    out_rows = []
    for i, (_, M, N, K) in enumerate(SHAPES):
        if only and i not in only:
            continue
        shortlist, model = candidates(M, N, K, sms)
        cfgs = {sm90.config_label(c): c for c in shortlist}
        sets = input_sets(M, N, K, torch.bfloat16)
        n = len(sets)
        tune = sm90.time_candidates(cfgs.values(), "bf16", sets[0][0], sets[0][1], sms, model, seed=seed)
        handicap = sm90.tuning_handicap(shortlist, model, M, N, sms)
        fns = {lbl: (lambda c: lambda j: sm90.gemm_nt(*sets[j % n], config=c))(c) for lbl, c in cfgs.items()}
        _, _, res = check_and_time(fns, sm90.SM90, shortlist[0], sets, M, N, K, rounds, inner, graph=True, seed=seed)
        rows = [dict(M=M, N=N, K=K, config=lbl, model=c == model,
                     tune_ms=round(tune[lbl], 5), graph_ms=round(res[lbl][0], 5), handicap=handicap.get(lbl, 1.0))
                for lbl, c in cfgs.items()]
        out_rows += rows
        fns = sets = None  # the shapes' operands reach ~1.5 GB per input set
        torch.cuda.empty_cache()
        if on_shape is not None:
            on_shape(rows)
    return out_rows


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per shape: ``tune_pick`` (autotuning's choice from its timings of the shortlist: the model's
    pick unless another is faster by ``config_tuning.WIN``, each time weighed by its ``handicap``),
    ``graph_pick`` (the fastest in the benchmark's regime) and ``pick_loss`` = graph time of
    ``tune_pick`` / graph time of ``graph_pick`` (1.0: the regimes agree)."""
    out = []
    for (M, N, K), g in df.groupby(["M", "N", "K"], sort=False):
        s = g.set_index("config")
        # As autotuning weighs its timings (the handicap measure recorded; rows without one: none).
        handicap = s.handicap.to_dict() if "handicap" in s else None
        tune_pick = s.loc[config_tuning.choose(s.tune_ms.to_dict(), s.index[s.model.astype(bool)][0], handicap)]
        graph_pick = s.loc[s.graph_ms.idxmin()]
        out.append(dict(M=M, N=N, K=K, tune_pick=tune_pick.name, graph_pick=graph_pick.name,
                        pick_loss=tune_pick.graph_ms / graph_pick.graph_ms))
    return pd.DataFrame(out)
