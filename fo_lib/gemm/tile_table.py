"""Measured full-wave times of the Hopper GEMM's tile configs, and the wave-quantization model that
picks a (tile, raster order, swizzle) for any shape from them.

The table is this GPU's ``gemm_sm90_tiles.csv`` as :func:`fo_lib.store.find` finds it
(``python -m fo_lib calibrate`` records it in the user's cache; ``data/<gpu>/`` ships one, with a
provenance sidecar): one row per (config, raster order, swizzle, grid ``M x N``, ``K``) with
the median time of one full wave (``ms_per_wave``: the GEMM's time over its wave count, its tiles
being an exact multiple of the SM count). The model predicts a shape's time for one candidate as

    ceil(ceil(M / BM) * ceil(N / BN) / sm_count) * ms_per_wave(K)

(the M/N tails count as whole tiles: a padded tile costs a CTA as long as a full one), with
``ms_per_wave`` read from the recorded grid whose tile-grid aspect (rows / columns) is nearest the
shape's (a raster's L2 reuse depends on it) and interpolated linearly in ``K`` between the recorded
``K`` (extrapolated from the nearest two beyond them). The fastest prediction wins (a smaller tile
by :data:`SMALLER_TILE_MARGIN` at least); predictions
within :data:`TIE` of it count as ties, which go to the bigger tile, then no cluster, then the wider
swizzle, then row before col order. A config with ``stream_k`` has its partial last wave shared by more CTAs
(:func:`waves`).

Pure: no torch, no CuPy (the GPU's name is read through torch only to find its folder).
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from .. import provenance
from .._util import ceil_div
from .config import GemmError, check_positive_ints
from .stream_k import stream_k_plan, stream_k_tiles

TABLE_NAME = "gemm_sm90_tiles.csv"
# A path to a table to use instead of data/<gpu>/gemm_sm90_tiles.csv, or "guess" for the table-free
# picker (an A/B switch; the GPU run points it at the table it has just recorded).
ENV_VAR = "FO_SM90_TILES"
COLUMNS = ("config", "tile_name", "order", "swizzle", "M", "N", "K", "waves", "ms_per_wave")
# NOTES: recorded medians repeat to ~0.5 % and the model ignores what a partial last wave saves, so
# a candidate less than 1 % faster on paper is no evidence: keep the bigger tile (fewer signals,
# fewer and larger overlap groups) and the plainer raster.
TIE = 0.01
# NOTES: a smaller tile must be predicted this much faster to be taken. On the 30 LLM shapes of
# bench_gemm_sm90_llm.py (H200) the 128 x 128 tile ran 2-9 % slower per unit area than 128 x 256
# (median 5 %, whole waves on both), where the recording grids have the two within 2 %: the
# recording grids flatter the small tile, and this margin is what the benchmark measured it lacks.
# A tile between the two (128 x 160 .. 240) gets the margin in proportion to the area it lacks: a
# guess (fewer of its operand bytes are reused than the big tile's, more than the small one's).
SMALLER_TILE_MARGIN = 0.05
# The stream-K tail's extra cost per unit of its work: the cut tiles' fp32 parts through L2 (a head,
# and a parked tail where it must wait) and the finishing CTA's epilogue. Fitted to
# bench_gemm_sm90_llm.py's whole-wave variants on an H200 (docs/decisions.md, "The stream-K tail's cost is one fitted constant per form"): -2..26 %
# (mean 14 %) on nine 128 x 256 shapes, 3-18 % on three 128 x 128 ones.
STREAM_K_FIXUP = 0.15
# The same for the split tail (stream_k_plan's split >= 2: each tail tile's parts run side by side,
# the last part adds the others' fp32 sums), per part: fitted the same way, 0.17-0.35 on six shapes
# of 2-3 parts, 0.60 on one of 4 parts of 16 k-blocks (the last part reads three others back).
STREAM_K_SPLIT_FIXUP = 0.25


@dataclass(frozen=True)
class TileTable:
    """A loaded table: ``entries[(config, order, swizzle)]`` is a tuple of recorded grids, each
    ``(log(tiles_m / tiles_n), (K, ...), (ms_per_wave, ...))`` with ``K`` ascending."""

    path: str
    entries: dict

    def rasters(self, config: str) -> list[tuple[str, int]]:
        return sorted((o, s) for (c, o, s) in self.entries if c == config)

    def has(self, config: str) -> bool:
        return any(c == config for (c, _, _) in self.entries)

    def ms_per_wave(self, config: str, order: str, swizzle: int, log_aspect: float, K: int) -> float:
        grids = self.entries[(config, order, swizzle)]
        _, ks, ms = min(grids, key=lambda g: abs(g[0] - log_aspect))
        return interpolate_k(ks, ms, K)


def interpolate_k(ks, ms, K: int) -> float:
    """``ms`` at ``K``: linear between the recorded ``ks`` (ascending), extrapolated from the two
    nearest beyond them (a wave's time is close to affine in K: a fixed prologue/epilogue plus the
    main loop); one recorded ``K`` scales in proportion."""
    if len(ks) == 1:
        return ms[0] * K / ks[0]
    i = 1
    while i < len(ks) - 1 and ks[i] < K:
        i += 1
    k0, k1, m0, m1 = ks[i - 1], ks[i], ms[i - 1], ms[i]
    value = m0 + (m1 - m0) * (K - k0) / (k1 - k0)
    if value <= 0:  # a noisy slope extrapolated far down: scale the nearest point instead
        j = min(range(len(ks)), key=lambda j: abs(ks[j] - K))
        value = ms[j] * K / ks[j]
    return value


def _positive_int(row: dict, name: str, where: str) -> int:
    raw = (row.get(name) or "").strip()
    try:
        v = int(raw)
    except ValueError:
        raise GemmError(f"{where}: {name} must be a positive int, got {raw!r}") from None
    if v <= 0:
        raise GemmError(f"{where}: {name} must be a positive int, got {raw!r}")
    return v


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, known: tuple, retired: tuple = ()) -> TileTable:
    known_tiles = {name: (tile_name, BM, BN) for name, tile_name, BM, BN in known}
    grids: dict = {}  # (config, order, swizzle) -> (M, N) -> K -> ms per wave
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise GemmError(f"{path}: missing column(s) {missing}; a tile table has {list(COLUMNS)} "
                            "(scripts/bench/record_sm90_tiles.py writes one)")
        for line, row in enumerate(reader, start=2):
            where = f"{path}, line {line}"
            name = (row["config"] or "").strip()
            if name in retired:  # recorded before the config was removed: says nothing about the others
                continue
            if name not in known_tiles:
                raise GemmError(f"{where}: unknown config {name!r} (known: {sorted(known_tiles)})")
            recorded, current = (row["tile_name"] or "").strip(), known_tiles[name][0]
            if recorded != current:
                # Another stage count or tile than the kernel compiled now: its times say nothing about it.
                raise GemmError(f"{where}: config {name} was recorded as {recorded!r}, the kernel is now "
                                f"{current!r}: re-record the table")
            order = (row["order"] or "").strip()
            if order not in ("row", "col"):
                raise GemmError(f"{where}: order must be 'row' or 'col', got {order!r}")
            swizzle, M, N, K, _ = (_positive_int(row, c, where) for c in ("swizzle", "M", "N", "K", "waves"))
            try:
                ms = float(row["ms_per_wave"])
            except (TypeError, ValueError):
                ms = math.nan
            if not (math.isfinite(ms) and ms > 0):
                raise GemmError(f"{where}: ms_per_wave must be a positive number, got {row['ms_per_wave']!r}")
            points = grids.setdefault((name, order, swizzle), {}).setdefault((M, N), {})
            if K in points:
                raise GemmError(f"{where}: a second row for {name} {order} swizzle {swizzle} at {M} x {N} x {K}")
            points[K] = ms
    if not grids:
        raise GemmError(f"{path}: no rows")
    entries = {}
    for (name, order, swizzle), by_grid in grids.items():
        _, BM, BN = known_tiles[name]
        entries[(name, order, swizzle)] = tuple(
            (math.log(ceil_div(M, BM) / ceil_div(N, BN)), tuple(sorted(pts)), tuple(pts[k] for k in sorted(pts)))
            for (M, N), pts in sorted(by_grid.items()))
    return TileTable(path, entries)


def load(path, configs: dict, retired=()) -> TileTable:
    """The table at ``path`` (cached until the file changes), every row checked against ``configs``
    (name -> tile config): GemmError names the file and line of the first bad one. Rows of the
    ``retired`` config names (removed after the table was recorded) are skipped."""
    path = str(path)
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError as exc:
        raise GemmError(f"sm90 tile table {path} cannot be read ({exc})") from None
    known = tuple(sorted((n, c.tile_name, c.BM, c.BN) for n, c in configs.items()))
    return _load(path, mtime, known, tuple(sorted(set(retired) - set(configs))))


# --- where the table is -------------------------------------------------------------------------
@lru_cache(maxsize=16)
def _gpu_tag_of(device_index: int) -> str:
    import torch
    return provenance.gpu_tag(torch.cuda.get_device_name(device_index))


def current_gpu_tag() -> str | None:
    """The data folder name of the current GPU ('h200'), or None without torch or a GPU."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        return _gpu_tag_of(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - no torch / no driver: no table
        return None


def table_path() -> str | None:
    """The table the picker reads now: ``$FO_SM90_TILES`` if set (``guess``: none; a named file
    that is missing is an error, not a silent fallback), else this GPU's table where
    :func:`fo_lib.store.find` finds one (the user's calibration, then
    ``<DATA_DIR>/<gpu>/``), else None (the documented guess, with one warning naming
    ``python -m fo_lib calibrate``)."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env == "guess":
        return None
    if env:
        if not os.path.isfile(env):
            raise GemmError(f"{ENV_VAR}={env}: no such file (unset it, or set it to 'guess' for the table-free "
                            "picker)")
        return env
    from .. import store
    found = store.find(TABLE_NAME, current_gpu_tag(), what="Hopper GEMM tile table")
    return str(found.path) if found else None


# --- the model ----------------------------------------------------------------------------------
def predict_ms(table: TileTable, name: str, cfg, M: int, N: int, K: int, sm_count: int) -> float:
    """Predicted ms of ``cfg`` (named ``name`` in the table, with its own order and swizzle) on
    ``M x N x K`` with ``sm_count`` CTAs. One wave: every raster runs the same tiles at once, so
    the best recorded raster's wave time. A raster the table lacks (a caller's own, or the
    recorder's shorter raster lists for some configs) is predicted with the best recorded one: an
    optimistic estimate on grids of several waves."""
    if not table.has(name):
        raise GemmError(f"{table.path} has no rows for {name}: re-record the table to predict it")
    tm, tn = ceil_div(M, cfg.BM), ceil_div(N, cfg.BN)
    aspect = math.log(tm / tn)
    if tm * tn <= sm_count or (name, cfg.order, cfg.swizzle) not in table.entries:
        per_wave = min(table.ms_per_wave(name, o, s, aspect, K) for o, s in table.rasters(name))
    else:
        per_wave = table.ms_per_wave(name, cfg.order, cfg.swizzle, aspect, K)
    if tm * tn <= sm_count:
        return per_wave
    return waves(tm * tn, sm_count, cfg.stream_k, ceil_div(K, cfg.BK)) * per_wave


def waves(tiles: int, sm_count: int, stream_k: bool, k_blocks: int) -> float:
    """The waves a launch takes: whole waves (a partial last one costs a full one), or with a
    stream-K tail (:func:`fo_lib.gemm.stream_k.stream_k_plan`) the whole waves before it plus, for
    runs, the tail's tiles shared by every CTA at an extra cost of :data:`STREAM_K_FIXUP` (one value
    fits both tile widths), for the split tail ``1 / split`` of a wave at :data:`STREAM_K_SPLIT_FIXUP`."""
    sk, split = stream_k_plan(tiles, sm_count, k_blocks) if stream_k else (0, 0)
    if sk == 0:
        return ceil_div(tiles, sm_count)
    if split >= 2:
        return (tiles - sk) / sm_count + (1 + STREAM_K_SPLIT_FIXUP) / split
    return (tiles - sk) / sm_count + sk / sm_count * (1 + STREAM_K_FIXUP)


def candidates(table: TileTable, configs: dict, M: int, N: int, sm_count: int):
    """``(name, config with raster)`` for every recorded raster that means something on this grid:
    one wave gets row order, swizzle 1 (whole waves of many, as recorded, cannot rank the rasters of
    one wave; autotuning times a few, ``fo_lib.gemm.sm90.config_tuning.ONE_WAVE_RASTERS``; clusters:
    swizzle 2, which pairs tiles down a tile column, and at least two tile rows); a swizzle wider than the grid
    along its band is skipped (it walks like a narrower one, which was not what was recorded). A
    config with ``stream_k`` comes both with and without it where the grid would have a tail."""
    for name, cfg in configs.items():
        cluster = cfg.cluster
        if not table.has(name) or sm_count % cluster:  # clusters need a whole number of them
            continue
        tm, tn = ceil_div(M, cfg.BM), ceil_div(N, cfg.BN)
        if cluster > 1 and tm < 2:  # clusters are recorded (and ranked) sharing B: two tile rows at least
            continue
        if tm * tn <= sm_count:
            # Clusters: swizzle 2 pairs tiles down a tile column (sharing B), as recorded.
            yield name, cfg.with_raster("row", 1 if cluster == 1 else 2).whole_waves()
            continue
        # A config says what runs: stream_k only where the grid has a tail to share.
        tails = (False, True) if cfg.stream_k and stream_k_tiles(tm * tn, sm_count) else (False,)
        for order, swizzle in table.rasters(name):
            if swizzle == 1 or swizzle <= (tm if order == "row" else tn):
                for tail in tails:
                    yield name, replace(cfg.with_raster(order, swizzle), stream_k=tail)


def smaller_tile_margin(area_ratio: float) -> float:
    """How much faster a tile of ``area_ratio`` times the biggest candidate's area must be predicted:
    :data:`SMALLER_TILE_MARGIN` at half the area, in proportion to the area it lacks (at most that)."""
    return SMALLER_TILE_MARGIN * min(1.0, 2.0 * max(0.0, 1.0 - area_ratio))


def ranked(table: TileTable, configs: dict, M: int, N: int, K: int, sm_count: int, smem_limit: int) -> list:
    """Every candidate among ``configs`` (name -> config) that fits ``smem_limit`` as ``(score,
    config)``, best first: the predicted ms, a smaller tile's counted :func:`smaller_tile_margin`
    higher; within :data:`TIE` of the best, the tie order of :func:`pick`."""
    check_positive_ints(M=M, N=N, K=K, sm_count=sm_count, smem_limit=smem_limit)
    fit = {n: c for n, c in configs.items() if c.smem_bytes <= smem_limit}
    if not fit:
        raise GemmError(f"no sm90 GEMM config fits {smem_limit} B of shared memory per block")
    scored = [(predict_ms(table, n, c, M, N, K, sm_count), c) for n, c in candidates(table, fit, M, N, sm_count)]
    if not scored:
        raise GemmError(f"{table.path} has no rows for any of {sorted(fit)}: re-record it "
                        f"(scripts/bench/record_sm90_tiles.py) or set {ENV_VAR}=guess")
    biggest = max(c.BM * c.BN for _, c in scored)
    scored = [(t * (1 + smaller_tile_margin(c.BM * c.BN / biggest)), c) for t, c in scored]
    best = min(t for t, _ in scored)
    # NOTES: the recorded grids are 8-16 waves; on bigger grids a narrow band re-reads the operands
    # from DRAM (16384 x 13824 x 5120 in row order, swizzle 1: 12 % slower than swizzle 8), while
    # the widest swizzle was within noise of the best on every recorded grid: ties go to it.
    # A cluster must win by more than a tie: it asks for an even CTA count. A last tie goes to the
    # cooperative consumers (the longer-tested schedule) over ping-pong.
    return sorted(scored, key=lambda tc: (tc[0] > best * (1 + TIE), tc[0] if tc[0] > best * (1 + TIE) else 0,
                                          -tc[1].BM * tc[1].BN, tc[1].cluster, -tc[1].swizzle,
                                          tc[1].order != "row", tc[1].stream_k, tc[1].pingpong))


def pick(table: TileTable, configs: dict, M: int, N: int, K: int, sm_count: int, smem_limit: int):
    """The fastest predicted candidate among ``configs`` (name -> config) that fit ``smem_limit``, a
    smaller tile's time counted :data:`SMALLER_TILE_MARGIN` higher (:func:`smaller_tile_margin`);
    ties (within :data:`TIE`) to the bigger tile, then no cluster, then the wider swizzle, then row
    order, then whole waves (no stream-K tail)."""
    return ranked(table, configs, M, N, K, sm_count, smem_limit)[0][1]
