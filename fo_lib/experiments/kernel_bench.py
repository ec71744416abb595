"""The kernel benchmarks behind Table 5 (GPU): our portable GEMM with and without its signal
epilogue against ``torch.matmul`` (cuBLAS), and the post-reorder RMSNorm against
``torch.nn.functional.rms_norm``.

Both time their variants in interleaved rounds (:func:`fo_lib.testing.bench_interleaved`) on inputs
that rotate over enough sets to keep every call's operands out of the 60 MB L2.
``scripts/bench/bench_gemm.py`` and ``scripts/bench/bench_postops.py`` are command lines over
:func:`run_gemm` and :func:`run_postops`; :func:`fo_lib.experiments.overheads.run` calls them in
measure mode. The shape lists and round counts are plain data, so the CPU tests can check them.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pandas as pd

from .. import jit
from ..gemm import config_tuning

L2_BYTES = 60 * 2**20
# Variants in a random order per round (fo_lib.testing.round_orders). NOTES: in the alternating order
# each variant keeps its place and its neighbours, and on this power-capped GPU the plain kernel timed
# twice then differed by 2-4 % on long (>= 1 ms) shapes; in a random order by ~1 % at most
# (docs/decisions.md, "GEMMs are timed as graph replays in a random order per round").
ORDER = "shuffle"
DTYPES = ("bf16", "f16")

# The scripts' default grids, and the small ones of `run_all.sh --quick` (a short and a long GEMM at
# both ends of K; the smallest and largest post-reorder row counts).
GEMM_SHAPES = dict(M=(1024, 2048, 4096, 8192, 16384), N=(4096, 8192), K=(1024, 4096, 8192))
GEMM_QUICK_SHAPES = dict(M=(2048, 8192), N=(8192,), K=(1024, 8192))
POSTOPS_SHAPES = dict(R=(1024, 4096, 16384), N=(1024, 4096, 8192, 16384))
POSTOPS_QUICK_SHAPES = dict(R=(1024, 16384), N=(4096, 8192))
BM = 128  # the post-reorder benchmark's tile rows (its tiles are BM x BN)


def shape_grid(*axes) -> list[tuple]:
    """Every combination, the first axis outermost (the order the scripts print)."""
    return list(itertools.product(*axes))


def gemm_shapes(quick: bool = False) -> list[tuple[int, int, int]]:
    s = GEMM_QUICK_SHAPES if quick else GEMM_SHAPES
    return shape_grid(s["M"], s["N"], s["K"])


def postops_shapes(quick: bool = False) -> list[tuple[int, int]]:
    s = POSTOPS_QUICK_SHAPES if quick else POSTOPS_SHAPES
    return shape_grid(s["R"], s["N"])


def gemm_rounds(quick: bool = False, rounds: int | None = None) -> tuple[int, int]:
    """``(rounds, calls per round)`` of the GEMM benchmark."""
    r, inner = (6, 3) if quick else (15, 5)
    return rounds or r, inner


def postops_rounds(quick: bool = False) -> int:
    return 7 if quick else 25


def torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {name!r}")
    return {"bf16": torch.bfloat16, "f16": torch.float16}[name]


# ---------------------------------------------------------------------------------------------- GEMM

def input_sets(M, N, K, dtype):
    """Enough (a, b, out) sets that rotating through them keeps every call's operands out of L2."""
    import torch

    elem = torch.finfo(dtype).bits // 8
    set_bytes = (M * K + N * K + M * N) * elem
    n_sets = config_tuning.rotation_sets(set_bytes, L2_BYTES)
    return [(torch.randn(M, K, device="cuda").to(dtype), torch.randn(N, K, device="cuda").to(dtype),
             torch.empty(M, N, dtype=dtype, device="cuda")) for _ in range(n_sets)]


def config_variant(configs_by_name, label: str, M: int):
    """The config a label names: ``NAME[/ORDER SWIZZLE][+sk]`` as ``fo_lib.gemm.sm90.config_label``
    writes it (``128x128x64c2/row8``, ``128x256x64+sk``); without a raster, row with a swizzle of up
    to 8 tile rows; ``+sk``: a stream-K tail (the Hopper configs). KeyError for an unknown name,
    ValueError (``GemmError``) for a bad raster or a config the kernel cannot run."""
    body, sk = (label[:-3], True) if label.endswith("+sk") else (label, False)
    name, _, raster = body.partition("/")
    c = configs_by_name[name]
    if sk:
        c = replace(c, stream_k=True)
    if not raster:
        c = c.with_raster("row", min(8, -(-M // c.BM)))
    else:
        order = raster.rstrip("0123456789")
        if order not in ("row", "col") or order == raster:
            raise ValueError(f"{label}: the raster is row<N> or col<N>, got {raster!r}")
        c = c.with_raster(order, int(raster[len(order):]))
    return c.validate()


def add_config_variants(fns, family, configs_by_name, names, sets, M):
    """Variants ``cfg:<label>``: each config :func:`config_variant` names, on the same inputs."""
    for name in names:
        c = config_variant(configs_by_name, name, M)
        fns[f"cfg:{name}"] = (lambda c: lambda i: family.gemm_nt(*sets[i % len(sets)], config=c))(c)


def error_vs_cublas(out, a, b) -> float:
    """``||out - a b^T|| / ||a b^T||`` against torch.matmul, on the device (a smoke check of a
    benchmark's kernel; the tests compare with float64)."""
    import torch

    want = torch.matmul(a, b.T).float()
    return ((out.float() - want).norm() / want.norm()).item()


def check_and_time(fns, family, cfg, sets, M, N, K, rounds, inner, graph, order=ORDER, record=None,
                   seed=0):
    """A correctness smoke check against cuBLAS (the tests compare with float64), then interleaved
    medians: returns ``(cfg, rel. error, {variant: (ms, TFLOP/s)})``. ``record``: a list that receives
    every round's measurements (``bench_interleaved``)."""
    from ..testing import bench_interleaved, summarize

    a, b, _ = sets[0]
    err = error_vs_cublas(family.gemm_nt(a, b, config=cfg), a, b)
    med = summarize(bench_interleaved(fns, rounds=rounds, inner=inner, warmup=2, graph=graph, order=order,
                                      seed=(seed, M, N, K), record=record))
    flop = 2.0 * M * N * K
    return cfg, err, {k: (v, flop / (v * 1e-3) / 1e12) for k, v in med.items()}


def gemm_shape(M, N, K, dtype, rounds, inner, configs=(), ablation=False, graph=False, control=False,
               order=ORDER, record=None, seed=0):
    """One shape of the GEMM benchmark: ``(cfg, rel. error, {variant: (ms, TFLOP/s)})``. Variants:
    ``torch``; ``ours`` (plain epilogue); ``signal`` (the engine's AllReduce-tile store + counter,
    one group per wave), ``signal_4g`` (at most 4 groups), ``signal_table`` (through the row table),
    ``signal_rows`` (C row-major); ``scatter`` (row-table store, no signal); with ``ablation`` the
    layout-vs-table variants; with ``control`` ``ours_again``; ``cfg:<name>`` per named config."""
    import torch

    from .. import gemm
    from ..testing import tile_tables

    sets = input_sets(M, N, K, dtype)
    n_sets = len(sets)
    sms = gemm.sm_count()
    cfg = gemm.default_config(M, N, K, sms)
    ro, tg, cnt, place = tile_tables(M, N, cfg, sms)
    _, tg4, cnt4, place4 = tile_tables(M, N, cfg, sms, groups=4)
    comm = [torch.empty(M * N, dtype=dtype, device="cuda") for _ in range(2)]

    fns = {
        "torch": lambda i: torch.matmul(sets[i % n_sets][0], sets[i % n_sets][1].T,
                                        out=sets[i % n_sets][2]),
        "ours": lambda i: gemm.gemm_nt(sets[i % n_sets][0], sets[i % n_sets][1], sets[i % n_sets][2],
                                       config=cfg),
        "scatter": lambda i: gemm.gemm_nt_scatter(sets[i % n_sets][0], sets[i % n_sets][1], comm[i % 2],
                                                  ro, config=cfg),
        "signal": lambda i: gemm.gemm_nt_signal(sets[i % n_sets][0], sets[i % n_sets][1], comm[i % 2],
                                                None, tg, cnt, config=cfg, tile_place=place),
        # The same with at most 4 groups (a CTA releases once per group it leaves, not per tile).
        "signal_4g": lambda i: gemm.gemm_nt_signal(sets[i % n_sets][0], sets[i % n_sets][1], comm[i % 2],
                                                   None, tg4, cnt4, config=cfg, tile_place=place4),
        "signal_table": lambda i: gemm.gemm_nt_signal(sets[i % n_sets][0], sets[i % n_sets][1], comm[i % 2],
                                                      ro, tg, cnt, config=cfg),
        # The same signal with C stored row-major (the AllReduce rows layout): no table read.
        "signal_rows": lambda i: gemm.gemm_nt_signal(sets[i % n_sets][0], sets[i % n_sets][1], comm[i % 2],
                                                     None, tg, cnt, config=cfg),
    }
    if ablation:
        # Same table-store path, but the table is plain row-major C: isolates the cost of the
        # tile-contiguous destination layout from the cost of reading the table.
        ro_rm = torch.from_numpy(np.arange(M, dtype=np.int64)[:, None] * N
                                 + np.arange(ro.shape[1], dtype=np.int64)[None, :] * cfg.BN).cuda()
        fns["scatter_rowmajor"] = lambda i: gemm.gemm_nt_scatter(sets[i % n_sets][0], sets[i % n_sets][1],
                                                                 comm[i % 2], ro_rm, config=cfg)
        # The destination buffer alone: the row-major table store into the rotating output sets,
        # and the plain store into the two communication buffers.
        fns["scatter_rowmajor_into_c"] = lambda i: gemm.gemm_nt_scatter(
            sets[i % n_sets][0], sets[i % n_sets][1], sets[i % n_sets][2].view(-1), ro_rm, config=cfg)
        fns["plain_into_comm"] = lambda i: gemm.gemm_nt(sets[i % n_sets][0], sets[i % n_sets][1],
                                                        comm[i % 2].view(M, N), config=cfg)
        # The signal kernels run with no group due (every tile's group -1): the same binaries, the
        # release skipped at run time. Separates the release's cost from the code's.
        tg_none = torch.full_like(tg, -1)
        fns["signal_no_group"] = lambda i: gemm.gemm_nt_signal(sets[i % n_sets][0], sets[i % n_sets][1],
                                                               comm[i % 2], None, tg_none, cnt, config=cfg,
                                                               tile_place=place)
        fns["signal_rows_no_group"] = lambda i: gemm.gemm_nt_signal(sets[i % n_sets][0], sets[i % n_sets][1],
                                                                    comm[i % 2], None, tg_none, cnt, config=cfg)
    if control:
        # The plain kernel once more, as its own variant: its difference from "ours" is what the
        # measurement itself gives two identical kernels (the noise floor of every "vs plain").
        fns["ours_again"] = lambda i: gemm.gemm_nt(sets[i % n_sets][0], sets[i % n_sets][1], sets[i % n_sets][2],
                                                   config=cfg)
    add_config_variants(fns, gemm.PORTABLE, gemm.CONFIGS, configs, sets, M)
    return check_and_time(fns, gemm.PORTABLE, cfg, sets, M, N, K, rounds, inner, graph, order, record, seed)


def gemm_header(configs=()) -> str:
    return (f"{'M':>6} {'N':>6} {'K':>6} {'config':>24} {'torch':>7} {'ours':>7} {'x':>5} {'signal':>7} "
            f"{'scat%':>6} {'sig%':>6}  vs_torch " + " ".join(f"{c:>11}" for c in configs))


def gemm_line(M, N, K, cfg, err, res, configs=()) -> str:
    t, o, s = res["torch"][1], res["ours"][1], res["signal"][1]
    overhead = (res["signal"][0] / res["ours"][0] - 1) * 100
    scat = (res["scatter"][0] / res["ours"][0] - 1) * 100
    extra = " ".join(f"{res['cfg:' + c][1]:11.1f}" for c in configs)
    return (f"{M:6d} {N:6d} {K:6d} {cfg.tile_name + '/' + cfg.order + str(cfg.swizzle):>24} "
            f"{t:7.1f} {o:7.1f} {o / t:5.2f} {s:7.1f} {scat:+6.1f} {overhead:+6.1f}  {err:.1e} {extra}")


def run_gemm(shapes, *, dtype: str = "bf16", rounds: int = 15, inner: int = 5, configs=(), ablation=False,
             graph=False, control=False, order=ORDER, seed=0, samples=False, log=print):
    """The GEMM benchmark over ``shapes`` ``[(M, N, K), ...]``: ``(rows, samples)`` as DataFrames, one
    row per (shape, variant) with its median ms and TFLOP/s (the columns of ``gemm_portable.csv``);
    ``samples`` (with ``samples=True``, else None) every round's time per variant and its place in the
    round. ``log`` gets the header and one table line per shape."""
    import torch

    tdtype = torch_dtype(dtype)
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    rows, kept = [], []
    log(gemm_header(configs))
    for M, N, K in shapes:
        record = [] if samples else None
        cfg, err, res = gemm_shape(M, N, K, tdtype, rounds, inner, configs, ablation, graph, control, order,
                                   record, seed)
        kept += [dict(M=M, N=N, K=K, round=r, place=q, variant=v, ms=round(ms, 5)) for r, q, v, ms in record or ()]
        log(gemm_line(M, N, K, cfg, err, res, configs))
        for name, (ms, tf) in res.items():
            rows.append(dict(M=M, N=N, K=K, dtype=dtype, variant=name,
                             config=cfg.tile_name if not name.startswith("cfg:") else name[4:],
                             order=cfg.order, swizzle=cfg.swizzle, median_ms=round(ms, 5),
                             tflops=round(tf, 2), rounds=rounds, inner=inner, rel_err=float(f"{err:.3e}")))
        del res
        torch.cuda.empty_cache()
    return pd.DataFrame(rows), (pd.DataFrame(kept) if samples else None)


# ----------------------------------------------------------------------------- post-reorder RMSNorm

def tile_permutation_table(R: int, N: int, BN: int, rng) -> np.ndarray:
    """BM x BN tiles of [R, N], each row-major, laid out back to back in a random order."""
    from ..testing import random_tile_layout

    return random_tile_layout(R, N, BM, BN, rng)[0]


def scatter(x, table, BN: int):
    """The communication buffer holding x in the table's layout (column block by column block)."""
    import torch

    R, N = x.shape
    buf = torch.empty(R * N, dtype=x.dtype, device=x.device)
    for t in range(table.shape[1]):
        cols = min(BN, N - t * BN)
        idx = table[:, t:t + 1] + torch.arange(cols, device=x.device)[None, :]
        buf[idx.reshape(-1)] = x[:, t * BN:t * BN + cols].reshape(-1)
    return buf


def _postops_calls(R, N, BN, dtype, rng, tprs, eps):
    """Inputs, a correctness check, and the calls to time: ``(calls, launchers, n_sets, max |err|)``."""
    import torch

    from .. import postops
    from ..postops import PostOps

    tensor_bytes = R * N * torch.finfo(dtype).bits // 8
    n_sets = max(2, min(8, math.ceil(3 * L2_BYTES / (2 * tensor_bytes))))
    table = torch.from_numpy(tile_permutation_table(R, N, BN, rng)).cuda()
    w = (0.5 + torch.rand(N, device="cuda")).to(dtype)
    xs = [torch.randn(R, N, device="cuda").to(dtype) for _ in range(n_sets)]
    bufs = [scatter(x, table, BN) for x in xs]
    outs = [torch.empty(R, N, dtype=dtype, device="cuda") for _ in range(n_sets)]
    touts = [torch.empty(R, N, dtype=dtype, device="cuda") for _ in range(n_sets)]
    norm = PostOps(rmsnorm=True, eps=eps)

    got = postops.post_reorder(bufs[0], table, (R, N), BN, norm, weight=w, check_table=True)
    want = torch.nn.functional.rms_norm(xs[0], (N,), w, eps=eps)
    err = (got.double() - want.double()).abs().max().item()
    if not torch.equal(postops.post_reorder(bufs[0], table, (R, N), BN), xs[0]):
        raise RuntimeError(f"plain gather differs from the row-major input at R={R}, N={N}")

    launchers = {
        "ours_rms": [postops.post_reorder_launcher(bufs[i], table, (R, N), BN, norm, weight=w, out=outs[i])
                     for i in range(n_sets)],
        "ours_gather": [postops.post_reorder_launcher(bufs[i], table, (R, N), BN, out=outs[i])
                        for i in range(n_sets)],
    }
    for g in tprs:
        try:
            launchers[f"ours_rms_g{g}"] = [postops.post_reorder_launcher(
                bufs[i], table, (R, N), BN, norm, weight=w, out=outs[i], threads_per_row=g) for i in range(n_sets)]
        except ValueError:
            pass  # the row does not fit with this width
    calls = {
        "torch_rms": lambda i: torch.nn.functional.rms_norm(xs[i % n_sets], (N,), w, eps=eps),
        "copy": lambda i: touts[i % n_sets].copy_(xs[i % n_sets]),
    }
    for name, ls in launchers.items():
        calls[name] = (lambda ls: lambda i: ls[i % n_sets]())(ls)
    order = ["torch_rms", "ours_rms", "copy", "ours_gather"] + [n for n in calls if n.startswith("ours_rms_g")]
    return {n: calls[n] for n in order}, launchers, n_sets, err


def _graph_medians(calls, n_sets, per_graph, rounds):
    """Medians per call, each variant timed as one CUDA graph of ``per_graph`` back-to-back calls."""
    import torch

    from ..testing import bench_interleaved, summarize

    graphs = {}
    torch.cuda.synchronize()
    for name, fn in calls.items():
        for i in range(n_sets):  # warm up outside capture (allocator, module loads)
            fn(i)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with jit.capture_graph(g):
            for i in range(per_graph):
                fn(i)
        graphs[name] = g
    torch.cuda.synchronize()
    fns = {name: (lambda g: lambda i: g.replay())(g) for name, g in graphs.items()}
    return {k: v / per_graph for k, v in summarize(bench_interleaved(fns, rounds=rounds, inner=1, warmup=2)).items()}


def postops_shape(R, N, BN, dtype, rounds, rng, use_graph, tprs=(), eps=1e-6, log=print):
    """One shape of the post-reorder benchmark: ``(medians ms, max |err| vs torch, graph used,
    ours_rms config, input sets, threads_per_row per variant)``."""
    from ..testing import bench_interleaved, summarize

    calls, launchers, n_sets, err = _postops_calls(R, N, BN, dtype, rng, tprs, eps)
    per_graph = n_sets * max(1, math.ceil(8 / n_sets))
    med = None
    if use_graph:
        try:
            med = _graph_medians(calls, n_sets, per_graph, rounds)
        except RuntimeError as exc:  # capture not possible here: time eagerly
            log(f"  (graph capture failed: {exc}; timing eager launches)")
            use_graph = False
    if med is None:
        med = summarize(bench_interleaved(calls, rounds=rounds, inner=per_graph, warmup=2))
    tpr = {name: ls[0].config.threads_per_row for name, ls in launchers.items()}
    return med, err, use_graph, launchers["ours_rms"][0].config, n_sets, tpr


POSTOPS_HEADER = (f"{'R':>6} {'N':>6} {'block':>9} {'torch_rms':>10} {'ours_rms':>10} {'ratio':>6} {'GB/s':>7} | "
                  f"{'copy':>9} {'gather':>9} {'ratio':>6} {'GB/s':>7}  max|err|")
POSTOPS_BASELINE = {"torch_rms": "torch_rms", "copy": "copy", "ours_gather": "copy"}  # else torch_rms


def run_postops(shapes, *, dtype: str = "bf16", BN: int = 128, rounds: int = 25, graph: bool = True, tprs=(),
                log=print) -> pd.DataFrame:
    """The post-reorder benchmark over ``shapes`` ``[(R, N), ...]``: one row per (shape, variant) with
    its median ms, GB/s and ratio to its baseline (the columns of ``postops.csv``)."""
    import torch

    tdtype = torch_dtype(dtype)
    rng = np.random.default_rng(0)
    rows = []
    log(POSTOPS_HEADER)
    for R, N in shapes:
        med, err, used_graph, cfg, n_sets, tpr = postops_shape(R, N, BN, tdtype, rounds, rng, graph, tprs, log=log)
        moved = 2 * R * N * torch.finfo(tdtype).bits // 8  # read + write, bytes
        gbs = {k: moved / (v * 1e-3) / 1e9 for k, v in med.items()}
        r_rms, r_copy = med["ours_rms"] / med["torch_rms"], med["ours_gather"] / med["copy"]
        extra = " ".join(f"{k[9:]}:{med[k] / med['torch_rms']:.3f}" for k in med if k.startswith("ours_rms_g"))
        log(f"{R:6d} {N:6d} {cfg.threads_per_row:>5}x{cfg.rows_per_cta:<3} {med['torch_rms'] * 1e3:9.1f}u "
            f"{med['ours_rms'] * 1e3:9.1f}u {r_rms:6.3f} {gbs['ours_rms']:7.0f} | {med['copy'] * 1e3:8.1f}u "
            f"{med['ours_gather'] * 1e3:8.1f}u {r_copy:6.3f} {gbs['ours_gather']:7.0f}  {err:.2e} {extra}")
        for name, ms in med.items():
            ref = POSTOPS_BASELINE.get(name, "torch_rms")
            rows.append(dict(R=R, N=N, BN=BN, dtype=dtype, variant=name, median_ms=f"{ms:.6f}",
                             GBps=f"{gbs[name]:.1f}", ratio=f"{ms / med[ref]:.4f}", baseline=ref,
                             threads_per_row=tpr.get(name, ""), rounds=rounds, graph=int(used_graph), sets=n_sets,
                             max_abs_err_vs_torch=f"{err:.3e}"))
        torch.cuda.empty_cache()
    return pd.DataFrame(rows)
