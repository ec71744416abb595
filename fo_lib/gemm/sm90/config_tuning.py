"""What autotuning of the Hopper GEMM's config times and how it weighs the timings: the shortlist
of a shape (:func:`tuning_candidates`, in more rasters on a one-wave grid), the handicap of a
single CTA there (:func:`tuning_handicap`, :func:`tuning_pick`), the idle before the timed rounds
(:func:`tuning_settle_s`) and the digest under which a tuning is remembered (:func:`kernel_digest`).
The timing itself, the family-independent rules and the cache: :mod:`fo_lib.gemm.config_tuning`;
the tuned pick of a plain call: :func:`fo_lib.gemm.sm90.launch.config_for`.

:data:`ONE_WAVE_RASTERS` is read at call time (set it on this module, not on the package, which
holds a copy). Pure apart from :func:`kernel_digest` (NVRTC).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from ..._util import ceil_div
from .. import config_tuning, tile_table
from ..config import MAX_SMEM
from ..stream_k import stream_k_tiles
from .configs import CONFIGS, Sm90Config, config_label
from .pick import candidate_pool, guess_config, load_table
from .source import ARCH, generate_source


def kernel_digest(dtype: str) -> str:
    """The digest under which tunings of ``dtype`` GEMMs are remembered: the compiler's cache keys of
    every candidate's plain kernel (with and without its stream-K tail), how they are timed
    (``config_tuning.TIMING``) and the one-wave rasters (a change to a source, a header, the NVRTC
    options or version, the configs, what autotuning weighs or how it times makes them tune again).
    Needs NVRTC (its version is part of the key)."""
    from ...jit.compiler import nvrtc_options
    return _kernel_digest(dtype, nvrtc_options(ARCH))


@lru_cache(maxsize=16)
def _kernel_digest(dtype: str, options: tuple) -> str:
    # Once per (dtype, options) and process, like the compiler's header snapshot (~0.1 s).
    from ...jit.compiler import source_key
    # Over the picker's pool: a tuning that weighed other configs does not apply.
    builds = [v for c in candidate_pool().values() for v in dict.fromkeys((c, c.whole_waves()))]
    weighs = [config_tuning.TIMING, repr(ONE_WAVE_RASTERS), repr(config_tuning.ONE_WAVE_SINGLE_CTA)]
    return config_tuning.digest(weighs + [
        f"{v.kernel_id} {source_key(generate_source(v, dtype, 'plain')[0], ARCH)}" for v in builds])


# The rasters autotuning tries for a one-wave grid: bands of 1, 2 and 8 tile rows, and of 8 columns.
ONE_WAVE_RASTERS = (("row", 1), ("row", 2), ("row", 8), ("col", 8))


def one_wave(cfg: Sm90Config, M: int, N: int, ctas: int) -> bool:
    """Whether ``cfg``'s tiles of ``M x N`` fit one wave of ``ctas`` CTAs (autotuning times more
    rasters there, after an idle)."""
    return cfg.grid(M, N, ctas).num_tiles <= ctas


def tuning_handicap(configs, model: Sm90Config, M: int, N: int, ctas: int) -> dict:
    """``{config_label: factor}`` for :func:`fo_lib.gemm.config_tuning.choose`: on a grid of one wave
    of the model's tiles, each single-CTA candidate's time counts ``config_tuning.ONE_WAVE_SINGLE_CTA``
    more."""
    one = one_wave(model, M, N, ctas)
    return {config_label(c): 1 + config_tuning.ONE_WAVE_SINGLE_CTA for c in configs if one and c.cluster == 1}


def tuning_pick(ms: dict, configs, model: Sm90Config, M: int, N: int, ctas: int) -> str:
    """The label autotuning picks from its timings ``ms`` of ``configs``
    (:func:`fo_lib.gemm.sm90.launch.time_candidates`): :func:`fo_lib.gemm.config_tuning.choose` with
    :func:`tuning_handicap`."""
    return config_tuning.choose(ms, config_label(model), tuning_handicap(configs, model, M, N, ctas))


def tuning_settle_s(model: Sm90Config, M: int, N: int, ctas: int) -> float:
    """Seconds of idle before autotuning's timed rounds: :data:`fo_lib.gemm.config_tuning.SETTLE_S`
    on a grid of one wave of the model's tiles, else none."""
    return config_tuning.SETTLE_S if one_wave(model, M, N, ctas) else 0.0


def tuning_candidates(path, M: int, N: int, K: int, ctas: int, model: Sm90Config) -> list:
    """What autotuning times for ``M x N x K`` on ``ctas`` CTAs:
    :func:`fo_lib.gemm.config_tuning.shortlist` of the tile table at ``path``'s ranking of the picker's
    pool, with the model's pick ``model`` and the table-free guess; on a grid of one wave of the model's tiles, each of those in every raster
    of :data:`ONE_WAVE_RASTERS` too."""
    ranked = tile_table.ranked(load_table(path), candidate_pool(), M, N, K, ctas, MAX_SMEM)
    out = config_tuning.shortlist(ranked, model, also=(guess_config(M, N, K, ctas),))
    # One wave: the table ranks a single raster per tile (it recorded whole waves of many), yet where
    # the tiles land still moves the time (clusters most): each shortlisted tile in a few rasters.
    if one_wave(model, M, N, ctas):
        more = (c.with_raster(o, s) for c in out for o, s in ONE_WAVE_RASTERS
                if s <= (ceil_div(M, c.BM) if o == "row" else ceil_div(N, c.BN)))  # (wider walks like narrower)
        out += list(dict.fromkeys(c for c in more if c not in out))
    return out


# Without a tile table, what a shape's first call times beside the guess: one tile of each kind the
# guess cannot weigh. The mid and odd widths fill a last wave the 128- and 256-wide tiles leave
# partial (2048 x 7168: 448 tiles of 128 x 256 are 3.4 waves on 132 SMs, 656 of 128 x 176 are 4.97;
# 1536 x 3584: 264 tiles of 128 x 168 make 2 whole waves), ping-pong consumers suit few-wave and
# narrow-N grids (each consumer's epilogue under the other's MMAs).
TABLE_FREE_TILES = ("128x256x64", "128x128x64", "128x192x64", "128x168x64", "128x176x64pd", "128x128x64p")


def table_free_candidates(M: int, N: int, K: int, ctas: int, model: Sm90Config) -> list:
    """What autotuning times for ``M x N x K`` on ``ctas`` CTAs with no tile table: the guess
    ``model`` and each tile of :data:`TABLE_FREE_TILES` in the guess's raster rule (row order, bands
    of up to 8 tile rows; one band on a one-wave grid), in whole waves and, where the grid has a
    partial last wave, with a stream-K tail."""
    out = [model]
    for name in TABLE_FREE_TILES:
        cfg = CONFIGS[name]
        tm, tn = ceil_div(M, cfg.BM), ceil_div(N, cfg.BN)
        tiles = tm * tn
        c = cfg.with_raster("row", 1 if tiles <= ctas else min(8, tm)).whole_waves()
        out.append(c)
        if cfg.cluster == 1 and tiles > ctas and stream_k_tiles(tiles, ctas):
            out.append(replace(c, stream_k=True))
    return list(dict.fromkeys(out))


def shortlist_digest(path) -> str:
    """What a shape's shortlist came from, for its tuning's cache key: the tile table's contents, or
    the table-free list and raster rule (``table-free`` and a digest of them)."""
    import os
    if path is None:
        return "table-free" + config_tuning.digest([repr(TABLE_FREE_TILES), "row, bands of 8, one on one wave, +sk"])[:8]
    st = os.stat(path)
    return _table_digest(str(path), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=8)
def _table_digest(path: str, mtime_ns: int, size: int) -> str:
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:12]
