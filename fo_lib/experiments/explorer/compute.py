"""The explorer's computation: the GEMM profile (recorded or modelled), the predictions, the design space."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ... import partition as part_mod
from ...predictor import OverlapModel, Prediction
from ...profiles import BandwidthCurve, GemmProfile, ProfileError
from ...tiling import TileGrid
from .errors import DESIGN_SPACE_MAX_WAVES, ELEM_BYTES, TILE_CONFIGS, ExplorerError
from .inputs import ExplorerInput, parse_partition, resolve
from .links import PORTABLE_ON_HOPPER, LinkPreset, presets


def tile_tflops(preset: LinkPreset, tile: str) -> float:
    """Sustained TFLOP/s of one SM on ``tile`` (the throughput model's one constant). Measured links:
    fitted to the preset's recorded profiles (median over shapes of one steady wave, waves 1 ..
    T-2, against a full tile's FLOPs); modelled links: the :class:`GpuSpec`'s assumption."""
    rate = preset.gpu.tflops_per_sm if preset.gpu else _fitted_tflops_per_sm(preset.key)
    return rate * (PORTABLE_ON_HOPPER if tile.startswith("portable") and (preset.gpu is None or preset.gpu.hopper)
                   else 1.0)


@lru_cache(maxsize=None)
def _fitted_tflops_per_sm(key: str) -> float:
    rates = []
    for _, p in presets()[key].profiles:
        bm, bn = p.config.get("BM", 128), p.config["BN"]
        steady = p.wave_ms[1:-1] or p.wave_ms
        rates.append(2.0 * bm * bn * p.K / (float(np.median(steady)) * 1e-3) / 1e12)
    return float(np.median(rates))


def modelled_profile(inp: ExplorerInput, preset: LinkPreset, grid: TileGrid) -> GemmProfile:
    """Per-wave times from a throughput model: every wave lasts one full tile's
    ``2 * BM * BN * K`` FLOPs at :func:`tile_tflops` (the tiles of a wave run side by side, one per
    CTA; a partial last wave takes as long as a full one). It ignores the first wave's ramp, memory
    bound shapes (small K) and L2 effects: a teaching model, not a measurement. No overlap runs the
    same GEMM on every SM."""
    cfg = TILE_CONFIGS[inp.tile]
    tile_ms = 2.0 * cfg.BM * cfg.BN * inp.K / (tile_tflops(preset, inp.tile) * 1e12) * 1e3
    full_waves = math.ceil(grid.num_tiles / inp.sm_count)
    elem = ELEM_BYTES[inp.dtype]
    return GemmProfile(M=inp.M, N=inp.N, K=inp.K, dtype=inp.dtype, config={"tile": inp.tile},
                       sm_count=inp.sm_count, comm_sms=inp.comm_sms, ctas=grid.ctas,
                       wave_ms=(tile_ms,) * grid.num_waves,
                       wave_bytes=tuple(int(b) * elem for b in grid.wave_elements()),
                       full_ms=tile_ms * full_waves, gpu=preset.gpu.name if preset.gpu else f"{preset.measured_gpu} (modelled)")


def recorded_profile(inp: ExplorerInput, preset: LinkPreset) -> GemmProfile | None:
    """The preset's recorded profile of exactly this GEMM (shape, dtype, tile, raster, CTAs), the same
    primitive's first; None when there is none."""
    cfg = TILE_CONFIGS[inp.tile]
    if not inp.tile.startswith("sm90"):
        return None  # the recorded sweeps ran the Hopper kernel
    hits = []
    for prim, p in preset.profiles:
        c = p.config
        if ((p.M, p.N, p.K, p.dtype, p.sm_count, p.ctas) == (inp.M, inp.N, inp.K, inp.dtype, inp.sm_count,
                                                             inp.sm_count - inp.comm_sms)
                and (c.get("BM", 128), c.get("BN"), c.get("order"), c.get("swizzle")) == (cfg.BM, cfg.BN, inp.order,
                                                                                          inp.swizzle)):
            hits.append((prim != inp.primitive, p))
    return min(hits, key=lambda h: h[0])[1] if hits else None


@dataclass(frozen=True)
class Explored:
    """What one view shows (see :func:`explore`)."""

    inp: ExplorerInput
    preset: LinkPreset
    grid: TileGrid
    profile: GemmProfile
    profile_source: str          # "recorded ..." or "modelled ..."
    curve: BandwidthCurve
    choice: str                  # "tuned" / "finest" / "one group" / "typed"
    chosen: Prediction
    finest: Prediction
    no_overlap: Prediction
    best: Prediction             # best overlapped partition (exact DP)
    tuned: Prediction            # what the tuner runs: best, or no overlap where that is faster
    one_group: Prediction        # all waves in one group, on the overlap's CTAs
    design_partitions: tuple | None   # every partition (T <= DESIGN_SPACE_MAX_WAVES), compositions() order
    design_ms: np.ndarray | None      # predicted total of each

    @property
    def num_waves(self) -> int:
        return self.grid.num_waves

    @property
    def best_speedup(self) -> float:
        return self.no_overlap.total_ms / self.best.total_ms

    @property
    def chosen_speedup(self) -> float:
        return self.no_overlap.total_ms / self.chosen.total_ms

    @property
    def runner_up(self) -> tuple[tuple, float] | None:
        """The second fastest partition of the design space and its predicted total; None without a
        design space (``T > DESIGN_SPACE_MAX_WAVES``) or with one partition."""
        if self.design_ms is None or len(self.design_ms) < 2:
            return None
        order = np.argsort(self.design_ms, kind="stable")
        best = tuple(self.best.partition)
        i = next(int(i) for i in order[:2] if self.design_partitions[i] != best)
        return self.design_partitions[i], float(self.design_ms[i])

    def summary(self) -> str:
        """The one-line answer the explorer reports: the best partition, its speedup, and how far
        ahead of the runner-up it is (whether the choice matters)."""
        part = ",".join(map(str, self.best.partition))
        verdict = "" if self.best_speedup > 1 else " (no overlap is faster: the tuner falls back)"
        ru = self.runner_up
        ahead = ("" if ru is None else
                 f"; runner-up ({','.join(map(str, ru[0]))}) {100 * (ru[1] / self.best.total_ms - 1):+.1f} %")
        return (f"best partition ({part}) of {self.num_waves} waves: {self.best.total_ms:.3f} ms, "
                f"{self.best_speedup:.2f}x vs no overlap ({self.no_overlap.total_ms:.3f} ms){ahead}{verdict}")


def design_space(model: OverlapModel) -> tuple[tuple, np.ndarray]:
    """Every partition of the model's ``T`` waves (in :func:`fo_lib.partition.compositions` order) and
    its predicted total, the recurrence vectorised over all ``2^(T-1)`` cut patterns at once (one
    NumPy step per wave boundary: milliseconds for ``T = 12``, where a loop of ``predict`` takes
    ~0.1 s). Equal to ``[model.predict(p).total_ms for p in compositions(T)]``."""
    T = model.num_waves
    if T > DESIGN_SPACE_MAX_WAVES:
        raise ExplorerError(f"the design space is drawn for at most {DESIGN_SPACE_MAX_WAVES} waves "
                            f"(2^{DESIGN_SPACE_MAX_WAVES - 1} partitions); this GEMM has {T}")
    ends = np.array([0.0] + [g.compute_end for g in model.predict(part_mod.finest(T)).groups])
    cost = model.comm_matrix()
    idx = np.arange(2 ** (T - 1), dtype=np.int64)
    m = np.zeros(idx.size)
    start = np.zeros(idx.size, dtype=np.int64)  # first wave of the open group
    for b in range(1, T + 1):
        # compositions() walks cut flags with the first gap as the most significant bit.
        cut = np.ones(idx.size, dtype=bool) if b == T else ((idx >> (T - 1 - b)) & 1).astype(bool)
        done = model.finish(np.maximum(ends[b], m), cost[start, b])
        m = np.where(cut, done, m)
        start = np.where(cut, b, start)
    return tuple(part_mod.compositions(T)), m


def explore(inp: ExplorerInput | None = None, **changes) -> Explored:
    """Compute one view (fields of :class:`ExplorerInput` as keywords). Raises :class:`ExplorerError`
    with one message on bad input."""
    inp, preset = resolve(inp, **changes)
    cfg = TILE_CONFIGS[inp.tile]
    try:
        grid = TileGrid(inp.M, inp.N, cfg.BM, cfg.BN, order=inp.order, swizzle=inp.swizzle,
                        sm_count=inp.sm_count, comm_sms=inp.comm_sms, K=inp.K)
    except (TypeError, ValueError) as exc:
        raise ExplorerError(str(exc)) from None
    if grid.num_waves > part_mod.MAX_SEARCH_WAVES:
        raise ExplorerError(f"{grid.num_waves} waves is more than the partition search takes "
                            f"({part_mod.MAX_SEARCH_WAVES}); use a bigger tile or a smaller M x N")
    kind, typed = parse_partition(inp.partition, grid.num_waves)
    profile = recorded_profile(inp, preset)
    if profile is not None and profile.num_waves == grid.num_waves:
        source = f"recorded profile ({preset.source.removeprefix('measured: ')})"
    else:
        profile = modelled_profile(inp, preset, grid)
        source = (f"modelled profile: {tile_tflops(preset, inp.tile):.2f} TFLOP/s per SM x "
                  f"{grid.ctas} CTAs" + (f" (fitted to the recorded {preset.measured_gpu} waves)" if preset.gpu is None else
                                         f" ({preset.gpu.source})"))
    curve = preset.curve(inp.primitive, inp.world_size)
    try:
        model = OverlapModel(profile, curve, inp.model)
        res = model.tune()
    except ProfileError as exc:
        raise ExplorerError(str(exc)) from None
    T = grid.num_waves
    one_group = model.predict(part_mod.no_overlap(T))
    chosen = {"tuned": res.choice, "finest": res.finest, "one group": one_group,
              "typed": model.predict(typed) if typed else None}[kind]
    parts, totals = design_space(model) if T <= DESIGN_SPACE_MAX_WAVES else (None, None)
    return Explored(inp, preset, grid, profile, source, curve, kind, chosen, res.finest, res.no_overlap,
                    res.best, res.choice, one_group, parts, totals)


def design_table(r: Explored):
    """The design space as a DataFrame (partition, groups, predicted ms, speedup over no overlap),
    fastest first; empty when ``T > DESIGN_SPACE_MAX_WAVES``."""
    import pandas as pd

    if r.design_ms is None:
        return pd.DataFrame(columns=["partition", "groups", "predicted_ms", "speedup"])
    df = pd.DataFrame({"partition": [list(p) for p in r.design_partitions],
                       "groups": [len(p) for p in r.design_partitions], "predicted_ms": r.design_ms})
    df["speedup"] = r.no_overlap.total_ms / df.predicted_ms
    return df.sort_values(["predicted_ms", "groups"], kind="stable").reset_index(drop=True)
