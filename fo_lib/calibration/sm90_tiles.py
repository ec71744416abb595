"""The Hopper GEMM's tile table, recorded on this GPU: the device time of one full wave per (tile
config, raster order, swizzle, grid, K), which :func:`fo_lib.gemm.sm90.default_config` reads to pick
a tile and raster for any shape (:mod:`fo_lib.gemm.tile_table`: waves x time of one wave).

Every grid is chosen so that its tiles are an exact multiple of the SM count for the tiles measured
on it (``waves`` waves of 128 x 256 tiles, twice as many of 128 x 128 on the same M x N; the widths
in between on the same M and the nearest N that makes whole waves of theirs): no partial wave, so
the GEMM's time over its wave count is the time of one wave. Three grid aspects (tile rows / tile
columns of 1/16, 1 and 16 for 128 x 256 tiles) because a raster's L2 reuse depends on how the
wave's tiles lie on the grid; the picker reads the recorded grid nearest in aspect to the shape.
All variants of one aspect and K (every config on its grid, torch.matmul on each grid as a
yardstick) run in the same interleaved rounds in a random order per round: a power-capped GPU's clock
drifts over a run, and grids timed one after another had differed by up to 20 % for cuBLAS and us
alike, which the picker then read as one width's speed. CUDA-graph replays (device time), inputs
rotated beyond the L2 (:mod:`fo_lib.experiments.kernel_bench`). Under a minute on an H100 or H200.
``python -m fo_lib calibrate`` and ``scripts/bench/record_sm90_tiles.py`` call :func:`record`.
"""
from __future__ import annotations

import math
from collections import defaultdict

from ..gemm import sm90

ASPECTS = (1 / 16, 1.0, 16.0)  # tile rows / tile columns of the 128 x 256 grid: wide, square, tall
# NOTES: 8 waves of the big tile (16 of the small): the launch and the last tile's epilogue, which
# the per-wave time absorbs, are then ~1 % of it, as in the LLM shapes of 4-50 waves.
WAVES = 8
KS = (1024, 4096, 8192, 16384)  # the picker interpolates between them, and extrapolates past 16384
RASTERS = tuple((order, swizzle) for order in ("row", "col") for swizzle in (1, 2, 4, 8))
# Recorded for clusters of 2: the rasters that pair tiles down a tile column (B shared).
CLUSTER_RASTERS = (("row", 2), ("row", 4), ("row", 8))
# The widths between 128 and 256 (sm90.MID_WIDTHS), in the rasters the picker took for the two
# others on the LLM shapes (bands of 8 tile rows, bands of 4 tile columns on wide grids, plain rows).
MID_RASTERS = (("row", 1), ("row", 8), ("col", 4))
MID_CLUSTER_RASTERS = (("row", 2), ("row", 8))


def rasters(cfg) -> tuple:
    """The rasters recorded for ``cfg``: every one for 128 and 256 wide, the mid widths' few otherwise."""
    if 256 % cfg.BN:
        return MID_RASTERS if cfg.cluster == 1 else MID_CLUSTER_RASTERS
    return RASTERS if cfg.cluster == 1 else CLUSTER_RASTERS


def full_wave_grid(sm_count: int, waves: int, aspect: float, BM: int = 128, BN: int = 256) -> tuple[int, int]:
    """``(M, N)`` whose ``BM x BN`` tiles are exactly ``waves x sm_count``, in the tile-row / tile-column
    ratio nearest ``aspect`` (in log; ties to fewer rows)."""
    tiles = waves * sm_count
    rows = min((d for d in range(1, tiles + 1) if tiles % d == 0),
               key=lambda d: (abs(math.log(d * d / tiles) - math.log(aspect)), d))
    return rows * BM, tiles // rows * BN


def grid_for(cfg, sm_count: int, waves: int, aspect: float) -> tuple[int, int]:
    """The grid ``cfg`` is recorded on at ``aspect``: that of 128 x 256 tiles where ``BN`` divides 256
    (whole waves of those are whole waves of 128 x 128), else whole waves of ``cfg``'s tiles with the
    area nearest that grid's (a GEMM's clock depends on how long it runs) and then the tile aspect
    nearest its (in log)."""
    M, N = full_wave_grid(sm_count, waves, aspect)
    if 256 % cfg.BN == 0:
        return M, N
    base_aspect = math.log((M // 128) / (N // 256))
    best = None
    for w in range(1, 4 * waves + 1):
        tiles = w * sm_count
        for tm in (d for d in range(1, tiles + 1) if tiles % d == 0):
            tn = tiles // tm
            score = (abs(math.log(tm * cfg.BM * tn * cfg.BN / (M * N))),
                     abs(math.log(tm / tn) - base_aspect))
            # Areas in the same 5 % step count as equal: then the aspect decides.
            key = (round(score[0] / 0.05), score[1])
            if best is None or key < best[0]:
                best = (key, (tm * cfg.BM, tn * cfg.BN))
    return best[1]


def grids(sm_count: int, waves: int = WAVES, aspects=ASPECTS) -> list[tuple[int, int, tuple[str, ...]]]:
    """The recording grids ``(M, N, config names measured on it)``, each checked to be whole waves
    of its configs' tiles."""
    return [g for aspect in aspects for g in aspect_grids(sm_count, waves, aspect)]


def aspect_grids(sm_count: int, waves: int, aspect: float) -> list[tuple[int, int, tuple[str, ...]]]:
    """The grids of one aspect (timed together), as :func:`grids`."""
    out: dict = defaultdict(list)
    for name, cfg in candidates(sm_count).items():
        M, N = grid_for(cfg, sm_count, waves, aspect)
        if M % cfg.BM or N % cfg.BN or (M // cfg.BM) * (N // cfg.BN) % sm_count:
            raise ValueError(f"{M} x {N} is not whole waves of {name} on {sm_count} SMs")
        out[(M, N)].append(name)
    return [(M, N, tuple(names)) for (M, N), names in out.items()]


def candidates(sm_count: int | None = None) -> dict:
    """The configs the picker chooses among (all of them are recorded; clusters only where
    ``sm_count`` CTAs make whole clusters)."""
    return {n: sm90.CONFIGS[n] for n in sm90.CANDIDATES
            if sm_count is None or sm_count % sm90.CONFIGS[n].cluster == 0}


def variant(name: str, order: str, swizzle: int) -> str:
    return f"{name}/{order}{swizzle}"


def table_rows(M, N, K, sm_count, medians, rounds, inner, names) -> list[dict]:
    """The table's rows for configs ``names`` on one (grid, K) from ``{variant: median ms}``
    (``torch`` the yardstick)."""
    rows = []
    for name in names:
        cfg = sm90.CONFIGS[name]
        tiles = (M // cfg.BM) * (N // cfg.BN)
        waves = tiles // sm_count
        for order, swizzle in rasters(cfg):
            ms = medians[variant(name, order, swizzle)]
            rows.append(dict(config=name, tile_name=cfg.tile_name, order=order, swizzle=swizzle, M=M, N=N, K=K,
                             sm_count=sm_count, tiles=tiles, waves=waves, median_ms=round(ms, 5),
                             ms_per_wave=round(ms / waves, 6), tflops=round(2.0 * M * N * K / (ms * 1e9), 1),
                             cublas_ms=round(medians["torch"], 5), rounds=rounds, inner=inner))
    return rows


def measure(group, K, dtype, rounds, inner, sm_count, seed):
    """``{(M, N): {variant: median ms}}`` for each grid ``(M, N, names)`` of ``group``: its configs x
    their rasters and torch.matmul (``torch``), all grids' variants in the same interleaved rounds."""
    import torch

    from ..experiments.kernel_bench import error_vs_cublas, input_sets
    from ..testing import bench_interleaved, summarize

    fns = {}
    for M, N, names in group:
        sets = input_sets(M, N, K, dtype)
        a, b, _ = sets[0]
        err = error_vs_cublas(sm90.gemm_nt(a, b, config=sm90.CONFIGS[names[0]], ctas=sm_count), a, b)
        if not err < 1e-2:
            raise RuntimeError(f"{M} x {N} x {K}: relative error {err:.1e} against torch.matmul")
        fns[(M, N, "torch")] = (lambda s: lambda i: torch.matmul(s[i % len(s)][0], s[i % len(s)][1].T,
                                                                 out=s[i % len(s)][2]))(sets)
        for name in names:
            for order, swizzle in rasters(sm90.CONFIGS[name]):
                c = sm90.CONFIGS[name].with_raster(order, swizzle)
                fns[(M, N, variant(name, order, swizzle))] = (
                    lambda s, c: lambda i: sm90.gemm_nt(*s[i % len(s)], config=c, ctas=sm_count))(sets, c)
    med = summarize(bench_interleaved(fns, rounds=rounds, inner=inner, warmup=2, graph=True, order="shuffle",
                                      seed=(seed, K, *group[0][:2])))  # each group its own orders
    out: dict = defaultdict(dict)
    for (M, N, v), ms in med.items():
        out[(M, N)][v] = ms
    return dict(out)


def record(out, Ks=KS, *, waves: int = WAVES, rounds: int = 12, inner: int = 3, seed: int = 0,
           progress=None, echo=print):
    """Record the table into ``out`` (CSV + provenance sidecar), rewritten atomically after every
    (aspect, K): a run cut short still leaves a usable table. ``progress``: called with no argument
    after each (aspect, K); ``echo``: where the per-grid lines go. Returns the rows as a DataFrame."""
    import pandas as pd
    import torch

    from ..provenance import write_result

    if not sm90.is_supported():
        raise sm90.GemmError("the Hopper tile table needs a compute capability 9.0 GPU")
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    sms = sm90.sm_count()
    rows = []
    for aspect in ASPECTS:
        group = aspect_grids(sms, waves, aspect)
        for K in Ks:
            medians = measure(group, K, torch.bfloat16, rounds, inner, sms, seed)
            torch.cuda.empty_cache()  # a group's operands: up to ~14 GB at K 16384 on an H200
            for M, N, names in group:
                got = table_rows(M, N, K, sms, medians[(M, N)], rounds, inner, names)
                rows += got
                echo(_grid_line(M, N, K, medians[(M, N)], got))
            write_result(pd.DataFrame(rows), out, link="none", dtype="bf16", rounds=rounds, inner=inner,
                         graph=True, kernel="fo_lib.gemm.sm90", waves=waves, aspects=list(ASPECTS),
                         interleaved="aspect x K")
            if progress is not None:
                progress()
    return pd.DataFrame(rows)


def _grid_line(M, N, K, med, got) -> str:
    best = {}
    for r in got:
        if r["config"] not in best or r["ms_per_wave"] < best[r["config"]]["ms_per_wave"]:
            best[r["config"]] = r
    return (f"{M:6d} x {N:6d} x {K:6d}: cuBLAS {2.0 * M * N * K / (med['torch'] * 1e9):6.1f} TFLOP/s; best "
            + "; ".join(f"{n} {r['order']}{r['swizzle']} {r['tflops']:6.1f} TFLOP/s, {r['ms_per_wave']:.4f} ms/wave"
                        for n, r in best.items()))
