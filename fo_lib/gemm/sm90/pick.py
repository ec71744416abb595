"""The Hopper GEMM's config picker: the tile config and raster a shape runs, from the GPU's measured
tile table (:mod:`fo_lib.gemm.tile_table`) or, without one, from a documented guess; and the table
model's predicted time of a config.

Pure: no torch, no CuPy.
"""
from __future__ import annotations

import os
from dataclasses import replace
from functools import lru_cache

from .. import tile_table
from ..config import MAX_SMEM, GemmError, pick_by_waves
from .configs import CONFIGS, RETIRED_CONFIGS, Sm90Config

# The table-free fallback (no measured table for this GPU): relative full-tile throughput per unit
# area, a GUESS (the bigger tile reuses each A/B byte twice as often), fed to pick_by_waves. With a
# table (fo_lib.gemm.tile_table) the measured wave times replace it.
_TILE_SPEED = {"128x256x64": 1.0, "128x128x64": 0.9}
_GUESS_CANDIDATES = ("128x256x64", "128x128x64")
# What the measured table chooses among (scripts/bench/record_sm90_tiles.py records each of them).
CANDIDATES = tuple(CONFIGS)


def candidate_pool(stream_k: bool = True) -> dict:
    """The :data:`CANDIDATES` as the picker weighs them: with a stream-K tail where ``stream_k``
    (clusters run whole waves). Every config is a candidate: one the choice would never pick is not
    compiled (docs/decisions.md, "Only ping-pong consumers store C themselves")."""
    return {n: replace(CONFIGS[n], stream_k=stream_k and CONFIGS[n].cluster == 1) for n in CANDIDATES}


def load_table(path) -> tile_table.TileTable:
    """The tile table at ``path`` checked against :data:`CONFIGS` (rows of
    :data:`~fo_lib.gemm.sm90.configs.RETIRED_CONFIGS` skipped)."""
    return tile_table.load(path, CONFIGS, RETIRED_CONFIGS)


def default_config(M: int, N: int, K: int, sm_count: int = 132, smem_limit: int = MAX_SMEM,
                   stream_k: bool = True) -> Sm90Config:
    """The tile config and raster for ``M x N x K`` on ``sm_count`` CTAs; ``stream_k=False``: the best
    in whole waves (what the overlap engine and its profiles run), not the best whole-wave tile of a
    stream-K pick.

    With a measured table for the current GPU (``data/<gpu>/gemm_sm90_tiles.csv`` under
    ``fo_lib.provenance.DATA_DIR``, or the file ``$FO_SM90_TILES`` names): the wave-quantization model
    of :mod:`fo_lib.gemm.tile_table` over every recorded (tile, order, swizzle): waves (M/N tails
    counted as whole tiles; a partial last wave shared by more CTAs where a stream-K tail pays,
    ``stream_k=True``) x measured time of one full wave at this K; the fastest wins, ties within
    1 % to the bigger tile, then no cluster, then the wider swizzle.

    Without one (a CPU, another GPU, or ``FO_SM90_TILES=guess``): the documented guess, the
    wave-count model of :func:`fo_lib.gemm.pick_by_waves` with ``_TILE_SPEED`` (estimated time =
    waves x padded tile area / tile speed, the smaller tile must win by 3 %), row order in bands of
    up to 8 tile rows, swizzle 1 when everything fits in one wave; no stream-K (unmeasured there)."""
    path = tile_table.table_path()
    # The file's mtime in the cache key: a table re-recorded in this process is read again.
    mtime = os.stat(path).st_mtime_ns if path else 0
    return _default_config(M, N, K, sm_count, smem_limit, path, mtime, bool(stream_k))


def guess_config(M: int, N: int, K: int, sm_count: int = 132, smem_limit: int = MAX_SMEM) -> Sm90Config:
    """The table-free pick (the documented guess above), whatever table there is."""
    return pick_by_waves({n: CONFIGS[n] for n in _GUESS_CANDIDATES}, _TILE_SPEED, M, N, K, sm_count, smem_limit,
                         family="sm90")


@lru_cache(maxsize=1024)
def _default_config(M, N, K, sm_count, smem_limit, path, mtime, stream_k) -> Sm90Config:
    if path is None:
        return guess_config(M, N, K, sm_count, smem_limit)
    # Clusters run whole waves (no stream-K tail).
    return tile_table.pick(load_table(path), candidate_pool(stream_k), M, N, K, sm_count, smem_limit)


def predict_ms(cfg: Sm90Config, M: int, N: int, K: int, sm_count: int = 132, path=None) -> float | None:
    """The table model's predicted ms of ``cfg`` (tile, order, swizzle) on ``M x N x K``; None
    without a table (``path``: default, the table :func:`default_config` reads now)."""
    path = path or tile_table.table_path()
    if path is None:
        return None
    name = next((n for n, c in CONFIGS.items() if c.tile_name == cfg.tile_name), None)
    if name is None:
        raise GemmError(f"{cfg.tile_name} is not one of the recorded CONFIGS {sorted(CONFIGS)}")
    return tile_table.predict_ms(load_table(path), name, cfg, M, N, K, sm_count)
