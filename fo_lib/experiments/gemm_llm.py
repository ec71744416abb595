"""The Hopper GEMM against cuBLAS on LLM projection shapes (the LLM-shape benchmark), and how the tile
width fills a GEMM's last wave: the logic of ``scripts/bench/bench_gemm_sm90_llm.py`` and notebook 14.

``C = A @ W^T``: ``A`` is M tokens x K, ``W`` the ``nn.Linear`` weight N x K of one projection at a
tensor-parallel degree (column-parallel layers split N, row-parallel ones split K). Head dim 128
everywhere; fused projections: qkv = (q heads + 2 kv heads) x 128, gate_up = 2 x FFN.

* Llama-3 8B: hidden 4096, FFN 14336, 32 q / 8 kv heads: qkv 6144, gate_up 28672, down K 14336;
* Llama-3 70B: hidden 8192, FFN 28672, 64 q / 8 kv heads: qkv 10240, gate_up 57344, down K 28672;
* Mixtral 8x7B: hidden 4096, expert FFN 14336 (top-2 of 8: an expert sees ~1/4 of the tokens);
* Qwen2.5-7B: hidden 3584, FFN 18944, 28 q / 4 kv heads (qkv 4608);
  Qwen2.5-32B: hidden 5120, FFN 27648, 40 q / 8 kv heads (qkv 7168);

each at TP 1, 2, 4 or 8 (:data:`SHAPES` names them), M from 1024 to 16384, seven M not multiples of
128 (1100, 2600, 3000, 5000, 6208, 8256, 14000).

Variants per shape (:func:`bench_shape`), in the same interleaved rounds, a random order per round,
as CUDA-graph replays (device time), inputs rotated beyond the L2
(:mod:`fo_lib.experiments.kernel_bench`): ``torch`` (``torch.matmul``), ``ours`` (what a plain
``fo_lib.gemm.sm90.gemm_nt`` runs, ``sm90.config_for``: the fastest of the tile table's shortlist,
timed on the shape's first call by :mod:`fo_lib.gemm.config_tuning` before these rounds; plain epilogue),
``model`` (the tile table's own pick, ``default_config``, timed where autotuning chose another),
``signal`` (ours with the engine's AllReduce-tile signal: one group per wave, through the row
table; in whole waves, as every signal runs), ``alt`` (the model's best config of another tile width), ``guess`` (the table-free picker's
config, timed only where it differs from both), ``no_sk`` (ours in whole waves, timed where it has a
stream-K tail), ``alt_flip`` (the other tile with the other stream-K choice, where its grid has a
tail), with ``cluster``, ``twin`` (ours with the other cluster choice) and, with ``control``,
``ours_again`` and ``torch_again``: the same calls again, each in a graph of its own, so a run shows
how far two timings of one thing in one process can differ (a shape's ratio that moves between
processes while its variants agree within one is the GPU's state, one that moves inside a process
is the variant's).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from ..gemm import sm90, tile_table
from ..gemm.config import MAX_SMEM
from ..gemm.stream_k import stream_k_tiles
from ..tiling import TileGrid
from . import common
from .common import load, measured_set, record, resolve_mode

NAME = "gemm_sm90_llm"
# The tile widths of fo_lib.gemm.sm90.CONFIGS (128 x BN x 64 tiles).
WIDTHS = tuple(sorted({c.BN for c in sm90.CONFIGS.values()}))
config_label = sm90.config_label

# (origin, M, N, K): origin = model, projection, TP degree.
SHAPES = [
    ("llama3-8b qkv tp1", 4096, 6144, 4096),
    ("llama3-8b qkv tp2", 6208, 3072, 4096),
    ("llama3-8b o tp1", 8192, 4096, 4096),
    ("llama3-8b gate_up tp1", 1536, 28672, 4096),
    ("llama3-8b gate_up tp2", 16384, 14336, 4096),
    ("llama3-8b gate_up tp4", 12288, 7168, 4096),
    ("llama3-8b down tp1", 3000, 4096, 14336),
    ("llama3-8b down tp2", 2048, 4096, 7168),
    ("llama3-70b qkv tp1", 4096, 10240, 8192),
    ("llama3-70b qkv tp4", 10240, 2560, 8192),
    ("llama3-70b qkv tp8", 8192, 1280, 8192),
    ("llama3-70b o tp4", 2048, 8192, 2048),
    ("llama3-70b o tp8", 16384, 8192, 1024),
    ("llama3-70b gate_up tp4", 8192, 14336, 8192),
    ("llama3-70b gate_up tp8", 5000, 7168, 8192),
    ("llama3-70b down tp2", 1024, 8192, 14336),
    ("llama3-70b down tp8", 3000, 8192, 3584),
    ("mixtral-8x7b expert gate_up tp1", 1024, 28672, 4096),
    ("mixtral-8x7b expert gate_up tp4", 4096, 7168, 4096),
    ("mixtral-8x7b expert down tp1", 2600, 4096, 14336),
    ("mixtral-8x7b expert down tp4", 6144, 4096, 3584),
    ("qwen2.5-7b qkv tp1", 4096, 4608, 3584),
    ("qwen2.5-7b gate_up tp2", 8192, 18944, 3584),
    ("qwen2.5-7b down tp1", 1536, 3584, 18944),
    ("qwen2.5-7b down tp2", 14000, 3584, 9472),
    ("qwen2.5-32b qkv tp1", 2048, 7168, 5120),
    ("qwen2.5-32b qkv tp4", 1100, 1792, 5120),
    ("qwen2.5-32b o tp1", 8256, 5120, 5120),
    ("qwen2.5-32b gate_up tp4", 16384, 13824, 5120),
    ("qwen2.5-32b down tp4", 4096, 5120, 6912),
]


def alt_config(cfg, M, N, K, sms):
    """The model's best config of the other tile size among the picker's pool (the table-free raster
    rule without a table)."""
    other = {n: c for n, c in sm90.candidate_pool(stream_k=False).items() if c.BN != cfg.BN}
    path = tile_table.table_path()
    if path is None:
        from ..gemm.config import pick_by_waves
        return pick_by_waves(other, {n: 1.0 for n in other}, M, N, K, sms, MAX_SMEM)
    return tile_table.pick(sm90.load_table(path), other, M, N, K, sms, MAX_SMEM)


def cluster_twin(cfg):
    """``cfg``'s tile with the other cluster choice, in whole waves: in clusters of 2 with a row raster
    of an even swizzle (2 at least), or, for a cluster pick, one CTA per tile in the same raster;
    None for a tile that has no cluster form (an odd count of 8-column blocks)."""
    if cfg.cluster == 1:
        twin = replace(cfg, cluster=2, stream_k=False).with_raster("row", max(2, cfg.swizzle + cfg.swizzle % 2))
        try:
            return twin.validate()
        except sm90.GemmError:
            return None
    return replace(cfg, cluster=1)


def bench_shape(M, N, K, dtype, rounds, inner, sms, seed, cluster=False, control=False):
    import torch

    from ..testing import tile_tables
    from .kernel_bench import check_and_time, input_sets

    sets = input_sets(M, N, K, dtype)
    n = len(sets)
    cfg = sm90.config_for(sets[0][0], sets[0][1])  # what a plain call runs: autotuned on first use
    model = sm90.default_config(M, N, K, sms)
    alt = alt_config(model, M, N, K, sms)
    guess = sm90.guess_config(M, N, K, sms)
    ro, tg, cnt, _ = tile_tables(M, N, cfg, sms)
    comm = [torch.empty(M * N, dtype=dtype, device="cuda") for _ in range(2)]

    def plain(c):
        return lambda i: sm90.gemm_nt(*sets[i % n], config=c)

    def cublas(i):
        return torch.matmul(sets[i % n][0], sets[i % n][1].T, out=sets[i % n][2])

    fns = {"torch": cublas,
           "ours": plain(cfg),
           "signal": lambda i: sm90.gemm_nt_signal(sets[i % n][0], sets[i % n][1], comm[i % 2], ro, tg, cnt,
                                                   config=cfg),  # whole waves: beside no_sk where cfg has a tail
           "alt": plain(alt)}
    if model != cfg:
        fns["model"] = plain(model)
    if guess not in (cfg, alt):
        fns["guess"] = plain(guess)
    sk = stream_k_tiles(cfg.grid(M, N, sms).num_tiles, sms) if cfg.stream_k else 0
    if sk:  # the same config in whole waves: what the stream-K tail gains or costs here
        fns["no_sk"] = plain(replace(cfg, stream_k=False))
    # The other tile with the other choice (clusters have no stream-K tail).
    if alt.cluster == 1 and stream_k_tiles(alt.grid(M, N, sms).num_tiles, sms):
        fns["alt_flip"] = plain(replace(alt, stream_k=not alt.stream_k))
    twin = cluster_twin(cfg) if cluster else None
    if twin is not None:  # the pick's tile with the other cluster choice (what clusters gain or cost here)
        fns["twin"] = plain(twin)
    if control:  # the same calls again, in graphs of their own (another closure: another variant)
        fns["ours_again"] = plain(cfg)
        fns["torch_again"] = cublas
    _, err, res = check_and_time(fns, sm90.SM90, cfg, sets, M, N, K, rounds, inner, graph=True, seed=seed)
    ms = {k: v for k, (v, _) in res.items()}
    ms["guess"] = ms.get("guess", ms["ours"] if guess == cfg else ms["alt"])
    ms.setdefault("model", ms["ours"])
    return cfg, model, alt, guess, err, ms


def summary(df) -> dict:
    """cuBLAS / ours geomean, median, worst; signal vs plain median (%: against the pick in whole
    waves where it takes a stream-K tail, as the signal runs); ours vs the guess's config."""
    ratio = df.cublas_ms / df.ours_ms
    plain_waves = df.no_sk_ms.where(df.stream_k_tiles > 0, df.ours_ms) if "no_sk_ms" in df else df.ours_ms
    return dict(geomean=math.exp(np.log(ratio).mean()), median=float(ratio.median()), worst=float(ratio.min()),
                signal_pct=float(((df.signal_ms / plain_waves - 1) * 100).median()),
                vs_guess=math.exp(np.log(df.guess_ms / df.ours_ms).mean()),
                vs_model=math.exp(np.log(df.model_ms / df.ours_ms).mean()),
                tuned=int((df.config != df.model_config).sum()),
                alt_faster=int((df.alt_ms < df.ours_ms * (1 - tile_table.TIE)).sum()),
                stream_k=int((df.stream_k_tiles > 0).sum()),
                sk_gain=(math.exp(np.log((df.no_sk_ms / df.ours_ms)[df.stream_k_tiles > 0]).mean())
                         if (df.stream_k_tiles > 0).any() else math.nan),
                flips=int((df.config != df.guess_config).sum()), shapes=len(df),
                twin=(df.twin_ms / df.ours_ms) if "twin_ms" in df else None,
                control=control_ratios(df) if "ours_again_ms" in df else None)


def control_ratios(df) -> tuple:
    """The control variants' second timings over their first: ``(ours, cuBLAS)`` per shape."""
    return df.ours_again_ms / df.ours_ms, df.cublas_again_ms / df.cublas_ms


def control_line(df, apart: float = 0.02) -> str:
    """One line on the control variants (``ours_again``, ``torch_again``): each over its first
    timing, min .. max, and the shapes where either differs by more than ``apart``."""
    ours, cub = control_ratios(df)
    off = [f"{M} x {N} x {K} (ours {o:.3f}, cuBLAS {c:.3f})"
           for M, N, K, o, c in zip(df.M, df.N, df.K, ours, cub) if abs(o - 1) > apart or abs(c - 1) > apart]
    return (f"control, the same calls again in graphs of their own: ours {ours.min():.3f} .. {ours.max():.3f}, "
            f"cuBLAS {cub.min():.3f} .. {cub.max():.3f}; apart by more than {apart:.0%}: "
            + (", ".join(off) if off else "none"))


def record_meta(rounds: int, inner: int) -> dict:
    """The provenance fields of a benchmark CSV beside the environment's: the protocol and the tile
    table the picks came from (its path and its own recording)."""
    import json
    from pathlib import Path

    table = tile_table.table_path()
    side = Path(table).with_suffix(".meta.json") if table else None
    table_meta = json.loads(side.read_text()) if side and side.exists() else {}
    return dict(link="none", dtype="bf16", rounds=rounds, inner=inner, graph=True, kernel="fo_lib.gemm.sm90",
                tiles_table=table or "guess",
                tiles_table_recorded={k: table_meta.get(k) for k in ("git_sha", "date", "gpu", "command")})


def measure_rows(rounds: int = 10, inner: int = 3, seed: int = 0, only=None, cluster: bool = False,
                 on_row=None, control: bool = False) -> list[dict]:
    """One row per shape of :data:`SHAPES` (``only``: indices into it) on this GPU, bf16;
    ``on_row(row, ms, predicted)`` after each (the script prints it); ``cluster``: the twin's
    columns, ``control``: ``ours_again_ms`` and ``cublas_again_ms`` (:func:`bench_shape`)."""
    import torch

    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    sms = sm90.sm_count()
    rows = []
    for i, (origin, M, N, K) in enumerate(SHAPES):
        if only and i not in only:
            continue
        cfg, model, alt, guess, err, ms = bench_shape(M, N, K, torch.bfloat16, rounds, inner, sms, seed,
                                                      cluster=cluster, control=control)
        torch.cuda.empty_cache()  # the shapes' operands reach ~1.5 GB per input set
        pred, alt_pred = (sm90.predict_ms(c, M, N, K, sms) for c in (cfg, alt))
        sk_plan = sm90.stream_k_schedule(cfg, M, N, K, sms)  # (what the launch runs)
        row = dict(M=M, N=N, K=K, ours_ms=round(ms["ours"], 5), cublas_ms=round(ms["torch"], 5),
                   signal_ms=round(ms["signal"], 5), config=config_label(cfg), origin=origin,
                   waves=cfg.grid(M, N, sms).num_waves, predicted_ms=pred and round(pred, 5),
                   model_config=config_label(model), model_ms=round(ms["model"], 5),
                   alt_config=config_label(alt), alt_ms=round(ms["alt"], 5),
                   alt_predicted_ms=alt_pred and round(alt_pred, 5),
                   guess_config=config_label(guess), guess_ms=round(ms["guess"], 5),
                   stream_k_tiles=sk_plan[0], stream_k_split=sk_plan[1],
                   no_sk_ms=round(ms.get("no_sk", ms["ours"]), 5),
                   alt_flip_ms=round(ms["alt_flip"], 5) if "alt_flip" in ms else None,
                   rel_err=float(f"{err:.3e}"), rounds=rounds, inner=inner)
        if cluster:
            twin = cluster_twin(cfg)
            row.update(twin_config=twin and config_label(twin), twin_ms=round(ms["twin"], 5) if twin else None)
        if control:
            row.update(ours_again_ms=round(ms["ours_again"], 5), cublas_again_ms=round(ms["torch_again"], 5))
        rows.append(row)
        if on_row is not None:
            on_row(row, ms, pred)
    return rows


# The record's protocol (data/h200/gemm_sm90_llm.csv), and ``run_all.sh --quick``'s: every third
# shape, 3 rounds.
FULL = dict(rounds=30, inner=3, cluster=True, control=True)
QUICK = dict(rounds=3, inner=3, only=list(range(0, len(SHAPES), 3)))


def run(mode: str = "auto", data_set: str = "h200", quick: bool = False) -> tuple[pd.DataFrame, dict]:
    """Measure on a compute capability 9.0 GPU (and record into ``data/<gpu>[-quick]/``) or replay
    ``data/<data_set>/gemm_sm90_llm.csv``; ``mode="auto"`` replays on other machines."""
    hopper = resolve_mode(mode, available=lambda: common.have_gpu() and sm90.is_supported(),
                          need="a CUDA GPU of compute capability 9.0 (the Hopper GEMM)")
    if hopper == "measure":
        kw = QUICK if quick else FULL
        df = pd.DataFrame(measure_rows(**kw))
        record(df, NAME, measured_set(quick), **record_meta(kw["rounds"], kw["inner"]))
        return load(measured_set(quick), NAME)
    return load(data_set, NAME)


def wave_fill(shapes=None, widths=WIDTHS, sm_count: int = 132, BM: int = 128) -> pd.DataFrame:
    """Per shape and tile width ``128 x BN``: the tiles, the waves they make on ``sm_count`` CTAs
    (a fraction), and ``fill``: the share of the whole waves' CTA time that does work (1 when the
    tiles are a whole number of waves; M and N tails count as whole tiles)."""
    rows = []
    for origin, M, N, K in shapes or SHAPES:
        for bn in widths:
            grid = TileGrid(M, N, BM, bn, sm_count=sm_count)
            tiles, whole = grid.num_tiles, grid.num_waves
            rows.append(dict(origin=origin, M=M, N=N, K=K, BN=bn, tiles=tiles, waves=tiles / sm_count,
                             whole_waves=whole, fill=tiles / (whole * sm_count),
                             work=whole * bn))  # CTA time in units of a 128-wide tile's k loop
    return pd.DataFrame(rows)


def width_of(label: str) -> int:
    """The tile width of a config label (``128x176x64c2/row8`` -> 176)."""
    return int(label.split("x")[1])


def ratios(df: pd.DataFrame) -> pd.DataFrame:
    """cuBLAS / ours per recorded shape for what a plain call runs (``tuned``), the tile table's own
    pick (``model``) and the table-free guess (``guess``), with the width each runs."""
    out = df[["origin", "M", "N", "K"]].copy()
    out["tuned"] = df.cublas_ms / df.ours_ms
    out["model"] = df.cublas_ms / df.get("model_ms", df.ours_ms)
    out["guess"] = df.cublas_ms / df.guess_ms
    out["tuned_BN"] = df.config.map(width_of)
    out["model_BN"] = df.get("model_config", df.config).map(width_of)
    out["tuned_config"] = df.config
    return out.sort_values("tuned").reset_index(drop=True)


def ab_compare(runs: list[tuple[str, pd.DataFrame]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two trees' kernels compared through runs of this benchmark in alternating processes (A, B,
    A, B, ...): each run's own cuBLAS / ours is measured side by side, so the trees compare through
    it. ``runs``: (tree label, the run's CSV) in run order, both trees over the same shapes. Returns
    one row per run (its :func:`summary` numbers) and one per shape: each tree's config (several
    joined by ``|`` where its runs picked differently), the median over its runs of cuBLAS / ours, and
    ``b_over_a`` (the second tree's over the first's)."""
    per_run, per_shape = [], []
    for i, (tree, df) in enumerate(runs):
        s = summary(df)
        per_run.append(dict(run=i, tree=tree, geomean=round(s["geomean"], 4), median=round(s["median"], 4),
                            worst=round(s["worst"], 4)))
        per_shape.append(df.assign(tree=tree, run=i, ratio=df.cublas_ms / df.ours_ms)[
            ["tree", "run", "M", "N", "K", "config", "ratio"]])
    trees = list(dict.fromkeys(t for t, _ in runs))
    if len(trees) != 2:
        raise ValueError(f"ab_compare needs runs of exactly two trees, got {trees}")
    a, b = trees
    long = pd.concat(per_shape)
    shape_sets = [set(map(tuple, long[long.tree == t][["M", "N", "K"]].to_numpy())) for t in trees]
    if shape_sets[0] != shape_sets[1]:
        raise ValueError(f"the trees' runs cover different shapes: {sorted(shape_sets[0] ^ shape_sets[1])}")
    shapes = (long.groupby(["M", "N", "K", "tree"], sort=False)
              .agg(ratio=("ratio", "median"), config=("config", lambda c: "|".join(dict.fromkeys(c))))
              .unstack("tree"))
    out = pd.DataFrame({"config_a": shapes["config"][a], "config_b": shapes["config"][b],
                        "a": shapes["ratio"][a].round(4), "b": shapes["ratio"][b].round(4),
                        "b_over_a": (shapes["ratio"][b] / shapes["ratio"][a]).round(4)})
    return pd.DataFrame(per_run), out.reset_index()
