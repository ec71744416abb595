"""The partition explorer (notebook 09): the design space of Fig. 9, the group-wise counting of
Fig. 6 and the predictor of Alg. 1, for a GEMM shape, a tile config and a link chosen by hand.

Everything here is a plain function of its inputs, so the notebook's widgets only call
:func:`explore` and :func:`draw` and tests reach every line:

* :func:`explore` computes the tile -> wave map (:class:`~fo_lib.tiling.TileGrid`), a
  :class:`~fo_lib.profiles.GemmProfile` (recorded when a data set has this exact GEMM, tile, raster
  and CTA count; else *modelled*, see :func:`modelled_profile`), the predicted timeline of the chosen
  partition beside the finest and no overlap (:mod:`fo_lib.predictor`), the best partition and its
  predicted speedup, and for ``T <= DESIGN_SPACE_MAX_WAVES`` every partition's predicted time;
* :func:`draw` draws one figure of it (tile map, timelines, design space);
* :func:`widget` wires ipywidgets controls to both (imported only there).

Link presets (:func:`presets`): every measured curve under ``data/`` (2 H200s over NVLink with NCCL's
kernels at each recorded CTA budget and with its copy engines, one H200's emulated link), and two
*modelled* links (latency + bandwidth, :data:`MODELLED_LINKS`) for boxes we have not measured.
Bad input raises one :class:`ExplorerError` (a ``ValueError``) whose message names the field.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from .. import partition as part_mod
from ..gemm import CONFIGS as PORTABLE_CONFIGS
from ..gemm import DTYPES
from ..gemm.sm90 import CONFIGS as SM90_CONFIGS
from ..predictor import MODELS, OverlapModel, Prediction
from ..profiles import PRIMITIVES, BandwidthCurve, GemmProfile, ProfileError
from ..provenance import DATA_DIR
from ..tiling import RASTER_ORDERS, TileGrid

DESIGN_SPACE_MAX_WAVES = 12  # 2^11 = 2048 partitions: evaluated in milliseconds, drawn as one artist
MAX_DIM = 1 << 20            # M, N, K beyond this are typos, not GEMMs
PARTITION_CHOICES = ("tuned", "finest", "one group")
ELEM_BYTES = {"bf16": 2, "f16": 2}

# Tile configs by name: the portable mma.sync kernel's and the Hopper (wgmma + TMA) kernel's.
TILE_CONFIGS = {**{f"sm90 {name}": cfg for name, cfg in SM90_CONFIGS.items()},
                **{f"portable {name}": cfg for name, cfg in PORTABLE_CONFIGS.items()}}


class ExplorerError(ValueError):
    """Input the explorer cannot model; the message names the field and what would work."""


# --- GPUs and links ------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuSpec:
    """What the throughput model needs of a GPU. ``tflops_per_sm``: sustained dense bf16 tensor-core
    TFLOP/s of one SM running one ``sm90`` tile (or, without Hopper, a portable tile)."""

    name: str
    sm_count: int
    tflops_per_sm: float
    hopper: bool
    source: str


# NOTES: modelled assumptions, not measurements. Peak dense bf16 (fp32 accumulate) from the vendors'
# data sheets: RTX 4090 165.2 TFLOP/s on 128 SMs (Ada whitepaper), A800 = A100's 312 TFLOP/s on 108
# SMs; a GEMM's main loop sustains ~70-75 % of peak on big tiles.
RTX4090 = GpuSpec("RTX 4090 (modelled)", 128, 165.2 * 0.70 / 128, False,
                  "165.2 TFLOP/s dense bf16 peak x 0.70 sustained / 128 SMs")
A800 = GpuSpec("A800 (modelled)", 108, 312.0 * 0.75 / 108, False,
               "312 TFLOP/s dense bf16 peak x 0.75 sustained / 108 SMs")
# The portable (mma.sync) kernel on Hopper reaches ~375-430 TFLOP/s where the wgmma kernel reaches
# ~800-900 (fo_lib.gemm's tile-speed notes, the recorded profiles): half the sm90 rate per SM.
PORTABLE_ON_HOPPER = 0.5


@dataclass(frozen=True)
class ModelledLink:
    """``t(bytes) = base_us + steps * step_us + factor * bytes / bus_gbps`` per collective, with
    NCCL's ring accounting: AllReduce ``2 (W-1)`` steps and bus factor ``2 (W-1) / W``;
    ReduceScatter and All-to-All ``W-1`` steps and ``(W-1) / W`` (``bytes`` as in
    :class:`~fo_lib.profiles.BandwidthCurve`: the buffer handed to the collective)."""

    bus_gbps: float
    base_us: float
    step_us: float
    default_world: int
    comm_sms: int
    source: str

    def curve(self, primitive: str, world_size: int, label: str) -> BandwidthCurve:
        W = world_size
        steps, factor = ((2 * (W - 1), 2 * (W - 1) / W) if primitive == "all_reduce"
                         else (W - 1, (W - 1) / W))
        sizes = np.logspace(10, 34, 49, base=2.0)  # 1 KiB .. 16 GiB: every group any GEMM here makes
        ms = (self.base_us + steps * self.step_us) * 1e-3 + factor * sizes / (self.bus_gbps * 1e6)
        return BandwidthCurve(tuple(zip(sizes.tolist(), ms.tolist())), primitive, W, label,
                              meta={"modelled": self.source})


# NOTES: modelled assumptions (cited, not measured here):
# * PCIe 4.0 x16 carries 32 GB/s per direction raw, ~25 GB/s effective; RTX 4090s have no P2P, so
#   NCCL goes through host memory: AllReduce bus bandwidth ~25 GB/s at best. The latency terms are
#   set so that one 192 KB tile on 4x 4090 AllReduce reaches 13 % of that bandwidth (the paper's
#   Fig. 8): 10 us + 6 steps x 11 us = 76 us beside 11.8 us of transfer.
# * A800 NVLink: 400 GB/s bidirectional (A100's 600 cut to 400), 200 GB/s per direction, of which
#   NCCL's ring reaches ~75 %: 150 GB/s bus bandwidth; a few us per ring step.
# * Communication SMs: NCCL's CTAs on these links are not measured here: 2 on PCIe (few channels),
#   16 on NVLink (we measured 24 on 2 H200s at NCCL's default).
MODELLED_LINKS = {
    "modelled 4090 pcie": (RTX4090, ModelledLink(
        25.0, 10.0, 11.0, 4, 2, "PCIe 4.0 x16 through host memory (no P2P): 25 GB/s AllReduce bus "
        "bandwidth, 10 us + 11 us per ring step (fits Fig. 8's 13 % for one 192 KB tile on 4 GPUs)")),
    "modelled a800 nvlink": (A800, ModelledLink(
        150.0, 6.0, 1.5, 8, 16, "NVLink 400 GB/s bidirectional (200 per direction) x 0.75: 150 GB/s "
        "AllReduce bus bandwidth, 6 us + 1.5 us per ring step")),
}

MODELLED_LABELS = {"modelled 4090 pcie": "RTX 4090s over PCIe 4.0, modelled (25 GB/s bus, no P2P)",
                   "modelled a800 nvlink": "A800s over NVLink, modelled (150 GB/s bus)"}


@dataclass(frozen=True)
class LinkPreset:
    """A link to explore: measured curves (one per primitive) with the GEMM profiles recorded beside
    them, or a modelled link whose curve is built for any world size."""

    key: str
    label: str
    gpu: GpuSpec | None                       # None: measured on H200s (rate fitted per preset)
    curves: dict = field(default_factory=dict)  # primitive -> BandwidthCurve (measured)
    profiles: tuple = ()                      # recorded GemmProfiles, (primitive, profile)
    comm_sms: dict = field(default_factory=dict)  # primitive -> SMs the collective took
    modelled: ModelledLink | None = None
    source: str = ""

    @property
    def measured(self) -> bool:
        return self.modelled is None

    @property
    def primitives(self) -> tuple[str, ...]:
        return tuple(self.curves) if self.measured else ("all_reduce", "reduce_scatter", "all_to_all")

    @property
    def world_size(self) -> int:
        return next(iter(self.curves.values())).world_size if self.measured else self.modelled.default_world

    @property
    def sm_count(self) -> int:
        return self.gpu.sm_count if self.gpu else self.profiles[0][1].sm_count

    def default_comm_sms(self, primitive: str) -> int:
        return self.comm_sms.get(primitive, 0) if self.measured else self.modelled.comm_sms

    def curve(self, primitive: str, world_size: int) -> BandwidthCurve:
        if primitive not in self.primitives:
            raise ExplorerError(f"link {self.key!r} has no {primitive} curve; it has {list(self.primitives)}")
        if self.measured:
            if world_size != self.world_size:
                raise ExplorerError(f"link {self.key!r} was measured at world size {self.world_size}, not "
                                    f"{world_size}; use {self.world_size} or a modelled link")
            return self.curves[primitive]
        return self.modelled.curve(primitive, world_size, self.key)


def _measured_label(data_set: str, budget, link: str) -> tuple[str, str]:
    sub = data_set.split("/", 1)[1].replace("_", "-") if "/" in data_set else ""
    where = f"[data/{data_set}" + (f": re-measured in the {sub} run]" if sub and budget != "copy_engine" else "]")
    if link == "emulated":
        return f"{data_set} emulated", f"1x H200, emulated link (2 virtual ranks) {where}"
    if budget == "copy_engine":
        return (f"{data_set} copy engine",
                f"2x H200 NVLink, NCCL copy engines (AllGather per group, summed by the post-reorder) {where}")
    if budget == 0:
        return f"{data_set} nccl", f"2x H200 NVLink, NCCL kernels (default CTAs) {where}"
    return f"{data_set} nccl {budget} ctas", f"2x H200 NVLink, NCCL kernels (<= {budget} CTAs) {where}"


def _load_measured(path) -> list[LinkPreset]:
    saved = json.loads(path.read_text())
    per_budget = saved if "curves" not in saved else {"0": saved}
    data_set = path.parent.relative_to(DATA_DIR).as_posix()
    out = []
    for budget, sv in per_budget.items():
        budget = int(budget) if budget.lstrip("-").isdigit() else budget
        curves = {k: BandwidthCurve.from_dict(v, where=f"{path} {k}") for k, v in sv["curves"].items()}
        profiles, comm = [], {}
        for d in sv["profiles"]:
            d = dict(d)
            prim = d.pop("primitive")
            prof = GemmProfile.from_dict(d, where=str(path))
            profiles.append((prim, prof))
            comm.setdefault(prim, prof.comm_sms)
        key, label = _measured_label(data_set, budget, next(iter(curves.values())).link)
        out.append(LinkPreset(key, label, None, curves, tuple(profiles), comm,
                              source=f"measured: {path.relative_to(DATA_DIR.parent).as_posix()}"))
    return out


@lru_cache(maxsize=1)
def presets() -> dict[str, LinkPreset]:
    """Every link preset by key: the measured ones first (the 2-GPU NCCL default leading), then the
    modelled ones. Measured: each ``data/<set>[/<sub>]/overlap_*_profiles.json`` outside ``runs/``
    and the ``-quick`` sets (one preset per NCCL CTA budget recorded in it)."""
    found = sorted(DATA_DIR.glob("*/overlap_*_profiles.json")) + sorted(DATA_DIR.glob("*/*/overlap_*_profiles.json"))
    measured = []
    for path in found:
        rel = path.relative_to(DATA_DIR).parts
        if rel[0].endswith("-quick") or "runs" in rel:
            continue
        measured += _load_measured(path)
    measured.sort(key=lambda p: (p.key != "h200x2 nccl", "/" in p.key.split()[0], p.key))
    out = {p.key: p for p in measured}
    for key, (gpu, link) in MODELLED_LINKS.items():
        out[key] = LinkPreset(key, MODELLED_LABELS[key], gpu, modelled=link,
                              source=f"modelled: {link.source}; GPU: {gpu.source}")
    return out


DEFAULT_LINK = "h200x2 nccl"


# --- inputs ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExplorerInput:
    """One view of the explorer. ``sm_count``, ``comm_sms`` and ``world_size`` left ``None`` take the
    link preset's (measured: the recorded GPU and the SMs the collective took; modelled: its
    assumptions). ``partition``: ``"tuned"``, ``"finest"``, ``"one group"`` or group sizes typed as
    ``"1,2,2"``."""

    M: int = 4096
    N: int = 8192
    K: int = 8192
    dtype: str = "bf16"
    tile: str = "sm90 128x256x64"
    sm_count: int | None = None
    comm_sms: int | None = None
    order: str = "row"
    swizzle: int = 8
    link: str = DEFAULT_LINK
    primitive: str = "all_reduce"
    world_size: int | None = None
    partition: str = "tuned"
    model: str = "refined"


def _int(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ExplorerError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ExplorerError(f"{name} must be in [{low}, {high}], got {value}")
    return int(value)


def _choice(name: str, value, options) -> str:
    if value not in options:
        raise ExplorerError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def parse_partition(text, num_waves: int) -> tuple[str, tuple[int, ...] | None]:
    """``("tuned" | "finest" | "one group" | "typed", groups or None)`` for a partition choice;
    typed group sizes must be positive integers summing to ``num_waves``."""
    if isinstance(text, (tuple, list)):
        text = ",".join(str(g) for g in text)
    if not isinstance(text, str):
        raise ExplorerError(f"partition must be one of {list(PARTITION_CHOICES)} or group sizes such as "
                            f"'1,2,2', got {text!r}")
    s = text.strip().lower()
    if s in PARTITION_CHOICES:
        return s, None
    if s == "one":
        return "one group", None
    body = s.strip("()[] ")
    items = [x for x in re.split(r"[,\s]+", body) if x]
    if not items or not all(x.isdigit() for x in items):
        raise ExplorerError(f"partition {text!r} is neither one of {list(PARTITION_CHOICES)} nor group sizes "
                            f"such as '1,2,2' (positive integers summing to the {num_waves} waves)")
    groups = tuple(int(x) for x in items)
    if any(g < 1 for g in groups):
        raise ExplorerError(f"partition {text!r}: every group needs at least one wave")
    if sum(groups) != num_waves:
        raise ExplorerError(f"partition {text!r} covers {sum(groups)} waves, but this GEMM has {num_waves} "
                            f"waves")
    return "typed", groups


def resolve(inp: ExplorerInput | None = None, **changes) -> tuple[ExplorerInput, LinkPreset]:
    """The input with the preset's defaults filled in, checked field by field."""
    inp = replace(inp or ExplorerInput(), **changes)
    link = _choice("link", inp.link, presets())
    preset = presets()[link]
    prim = _choice("primitive", inp.primitive, PRIMITIVES)
    if prim not in preset.primitives:
        raise ExplorerError(f"link {link!r} has no {prim} curve; it has {list(preset.primitives)}")
    tile = _choice("tile", inp.tile, TILE_CONFIGS)
    if tile.startswith("sm90") and preset.gpu is not None and not preset.gpu.hopper:
        raise ExplorerError(f"tile {tile!r} needs a Hopper GPU, but link {link!r} is a {preset.gpu.name}; "
                            f"pick a 'portable ...' tile")
    sm_count = _int("sm_count", preset.sm_count if inp.sm_count is None else inp.sm_count, 1, 1024)
    comm = _int("comm_sms", preset.default_comm_sms(prim) if inp.comm_sms is None else inp.comm_sms,
                0, sm_count - 1)
    world = preset.world_size if inp.world_size is None else inp.world_size
    world = _int("world_size", world, 2, 1024)
    if preset.measured and world != preset.world_size:
        raise ExplorerError(f"link {link!r} was measured at world size {preset.world_size}, not {world}; "
                            f"use {preset.world_size} or a modelled link")
    K = _int("K", inp.K, 8, MAX_DIM)
    if K % 8:
        raise ExplorerError(f"K must be a multiple of 8 (16-byte operand rows), got {K}")
    return replace(inp, M=_int("M", inp.M, 1, MAX_DIM), N=_int("N", inp.N, 1, MAX_DIM), K=K,
                   dtype=_choice("dtype", inp.dtype, DTYPES), tile=tile, sm_count=sm_count, comm_sms=comm,
                   order=_choice("order", inp.order, RASTER_ORDERS), swizzle=_int("swizzle", inp.swizzle, 1, 64),
                   link=link, primitive=prim, world_size=world,
                   model=_choice("model", inp.model, MODELS)), preset


# --- the GEMM profile -----------------------------------------------------------------------------
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
                       full_ms=tile_ms * full_waves, gpu=preset.gpu.name if preset.gpu else "H200 (modelled)")


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


# --- the explorer's computation ---------------------------------------------------------------------
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

    def summary(self) -> str:
        """The one-line answer the explorer reports."""
        part = ",".join(map(str, self.best.partition))
        verdict = "" if self.best_speedup > 1 else " (no overlap is faster: the tuner falls back)"
        return (f"best partition ({part}) of {self.num_waves} waves: {self.best.total_ms:.3f} ms, "
                f"{self.best_speedup:.2f}x vs no overlap ({self.no_overlap.total_ms:.3f} ms){verdict}")


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
                  f"{grid.ctas} CTAs" + (" (fitted to the recorded H200 waves)" if preset.gpu is None else
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

# --- drawing --------------------------------------------------------------------------------------
def new_figure():
    """A figure laid out for :func:`draw` (built once, redrawn in place by the widget)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 7.6))
    _layout(fig)
    return fig


def _layout(fig) -> None:
    # NOTES: fixed margins, not constrained layout: measuring every label to place the axes took
    # ~0.25 s of a ~0.5 s redraw.
    fig.clear()
    fig.subplot_mosaic([["tiles", "timeline"], ["space", "space"]], width_ratios=[1, 2.4], height_ratios=[1.3, 1],
                       gridspec_kw=dict(left=0.055, right=0.985, top=0.91, bottom=0.075, wspace=0.12, hspace=0.42))


def _group_edges(groups: np.ndarray):
    """Line segments between neighbouring tiles of different groups (imshow coordinates)."""
    segs = []
    ys, xs = np.nonzero(groups[:, 1:] != groups[:, :-1])
    segs += [((x + 0.5, y - 0.5), (x + 0.5, y + 0.5)) for y, x in zip(ys, xs)]
    ys, xs = np.nonzero(groups[1:, :] != groups[:-1, :])
    segs += [((x - 0.5, y + 0.5), (x + 0.5, y + 0.5)) for y, x in zip(ys, xs)]
    return segs


def _groups_cmap():
    import matplotlib

    return matplotlib.colormaps["viridis"]


def draw(r: Explored, fig=None):
    """Draw one view into ``fig`` (cleared; :func:`new_figure` when None) and return it: the tile ->
    wave map with the chosen partition's group boundaries (Fig. 6's counting groups), the predicted
    timelines (chosen, finest, no overlap) and the design space of Fig. 9 (every partition's
    predicted time, sorted)."""
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Patch

    if fig is None:
        fig = new_figure()
    axes = {ax.get_label(): ax for ax in fig.axes}
    if set(axes) != {"tiles", "timeline", "space"}:
        _layout(fig)
        axes = {ax.get_label(): ax for ax in fig.axes}
    for ax in axes.values():
        ax.clear()
    g, T = r.grid, r.num_waves
    inp = r.inp

    # Tile -> wave map, group boundaries of the chosen partition in white.
    ax = axes["tiles"]
    waves = g.tile_wave.reshape(g.tiles_m, g.tiles_n)
    group_of = part_mod.group_of_wave(r.chosen.partition)[waves]
    ax.imshow(waves, cmap="viridis", vmin=0, vmax=max(T - 1, 1), interpolation="nearest", aspect="auto")
    ax.add_collection(LineCollection(_group_edges(group_of), colors="w", linewidths=1.6))
    if g.num_tiles <= 96:
        for (y, x), w in np.ndenumerate(waves):
            ax.text(x, y, str(w), ha="center", va="center", fontsize=7, color="w" if w < T / 2 else "k")
    ax.set(xlabel=f"tile column ({g.tiles_n} x {g.BN})", ylabel=f"tile row ({g.tiles_m} x {g.BM})",
           title=f"tile -> wave: {g.num_tiles} tiles / {g.ctas} CTAs = {T} waves\n"
                 f"colour: wave 0 (dark) .. {T - 1} (yellow); white: {r.choice} groups "
                 f"{list(r.chosen.partition)}")
    ax.title.set_fontsize(9)

    # Timelines.
    ax = axes["timeline"]
    lanes = [(f"{r.choice} {list(r.chosen.partition)}", r.chosen), (f"finest ({T} groups)", r.finest),
             ("no overlap (all SMs)", r.no_overlap)]
    ticks, names = [], []
    for i, (name, pred) in enumerate(lanes):
        y = 3 * (len(lanes) - 1 - i)
        colors = [f"C{gt.group % 10}" for gt in pred.groups]
        ax.broken_barh([(gt.compute_start, gt.compute_end - gt.compute_start) for gt in pred.groups],
                       (y + 1.05, 0.85), facecolors=colors, edgecolor="k", linewidth=0.4)
        ax.broken_barh([(gt.comm_start, gt.comm_end - gt.comm_start) for gt in pred.groups],
                       (y + 0.1, 0.85), facecolors=colors, edgecolor="k", linewidth=0.4, hatch="//")
        ax.text(pred.total_ms, y + 0.5, f" {pred.total_ms:.3f} ms", va="center", fontsize=8)
        ax.text(0, y + 2.0, name, va="bottom", fontsize=8, weight="bold")
        ticks += [y + 0.5, y + 1.5]
        names += ["comm", "GEMM"]
    ax.set_yticks(ticks, names, fontsize=7)
    ax.set_ylim(-0.2, 3 * len(lanes) - 0.2)
    ax.set_xlim(0, max(p.total_ms for _, p in lanes) * 1.13)
    ax.set_xlabel("ms (predicted)")
    ax.set_title(f"{inp.primitive} {inp.M}x{inp.N}x{inp.K} {inp.dtype}, {inp.tile}, {r.preset.label}, "
                 f"W={inp.world_size}, model '{inp.model}'\n{r.profile_source}", fontsize=8)

    # Design space (Fig. 9).
    ax = axes["space"]
    if r.design_ms is None:
        ax.text(0.5, 0.5, f"T = {T} waves: 2^{T - 1} partitions (the design space is drawn for T <= "
                          f"{DESIGN_SPACE_MAX_WAVES});\nthe exact DP chose {list(r.best.partition)}: "
                          f"{r.best.total_ms:.3f} ms", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        ax.set_axis_on()
        order = np.argsort(r.design_ms, kind="stable")
        ms = r.design_ms[order]
        ngroups = np.array([len(r.design_partitions[i]) for i in order])
        x = np.arange(ms.size)
        width_pt = ax.get_position().width * fig.get_figwidth() * 72  # one bar per partition, no gaps
        shade = _groups_cmap()
        segs = np.zeros((ms.size, 2, 2))
        segs[:, :, 0] = x[:, None]
        segs[:, 1, 1] = ms
        # One LineCollection from an array (ax.vlines goes through masked arrays: ~80 ms at T = 12).
        ax.add_collection(LineCollection(segs, colors=shade(0.92 * (ngroups - 1) / max(T - 1, 1)),
                                         antialiaseds=False, linewidths=min(12.0, 0.9 * width_pt / ms.size)),
                          autolim=False)
        rank = {p: k for k, p in enumerate(r.design_partitions[i] for i in order)}
        marks = [("best", r.best, "*", 14), ("finest", r.finest, "v", 8),
                 ("one group", r.one_group, "s", 7)]
        if r.choice == "typed":
            marks.append(("typed", r.chosen, "D", 8))
        for name, pred, marker, size in marks:
            k = rank[tuple(pred.partition)]
            ax.plot(k, pred.total_ms, marker, color="k", ms=size, label=f"{name} {list(pred.partition)}: "
                                                                        f"{pred.total_ms:.3f} ms")
        ax.axhline(r.no_overlap.total_ms, color="0.3", ls="--", lw=1,
                   label=f"no overlap: {r.no_overlap.total_ms:.3f} ms")
        lo = min(ms.min(), r.no_overlap.total_ms)
        hi = max(ms.max(), r.no_overlap.total_ms)
        ax.set_ylim(lo - 0.15 * (hi - lo) - 1e-9, hi + 0.5 * (hi - lo) + 1e-9)  # headroom for the legends
        ax.set_xlim(-1, ms.size)
        ax.set(xlabel=f"all 2^{T - 1} = {ms.size} partitions of {T} waves, sorted by predicted time "
                      f"(colour: number of groups)", ylabel="predicted ms (overlapped)")
        first = ax.legend(fontsize=7, loc="upper left", ncol=2)
        ax.add_artist(first)
        counts = sorted(set(ngroups.tolist()))
        ax.legend(handles=[Patch(color=shade(0.92 * (n - 1) / max(T - 1, 1)), label=str(n)) for n in counts],
                  title="groups", title_fontsize=7, fontsize=7, loc="upper right", ncol=min(len(counts), 6),
                  handlelength=1.0, columnspacing=0.8)
    ax.set_title("design space (Fig. 9): " + r.summary(), fontsize=9)
    return fig



def render_png(fig, dpi: int = 80) -> bytes:
    """The figure as PNG bytes (fast zlib level: encoding is then ~5 % of a redraw)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


def redraw(fig, inp: ExplorerInput | None = None, dpi: int = 80, **changes) -> tuple[Explored, bytes, dict]:
    """One widget update: :func:`explore`, :func:`draw`, PNG bytes, and how long each step took (s)."""
    import time

    t0 = time.perf_counter()
    r = explore(inp, **changes)
    t1 = time.perf_counter()
    draw(r, fig)
    png = render_png(fig, dpi)
    t2 = time.perf_counter()
    return r, png, {"compute_s": t1 - t0, "draw_s": t2 - t1, "total_s": t2 - t0}


# --- the widget -----------------------------------------------------------------------------------
def widget(inp: ExplorerInput | None = None, dpi: int = 80):
    """ipywidgets controls for every :class:`ExplorerInput` field, redrawing one figure (an
    ``ipywidgets.Image``) on each change. Returns the ``VBox``; ``.controls`` (field -> widget),
    ``.image``, ``.summary`` and ``.status`` are attached for tests and for the browser test's CSS
    classes (``fo-explorer-image``, ``fo-explorer-summary``, ``fo-control-<field>``)."""
    import ipywidgets as w

    inp, preset = resolve(inp)
    fig = new_figure()
    style = {"description_width": "90px"}
    lay = w.Layout(width="300px")

    def slider(name, lo, hi, step, value):
        return w.IntSlider(value=value, min=lo, max=hi, step=step, description=name, continuous_update=False,
                           style=style, layout=lay)

    c = {
        "M": slider("M", 128, 32768, 128, inp.M),
        "N": slider("N", 128, 32768, 128, inp.N),
        "K": slider("K", 256, 32768, 256, inp.K),
        "dtype": w.Dropdown(options=list(DTYPES), value=inp.dtype, description="dtype", style=style, layout=lay),
        "tile": w.Dropdown(options=list(TILE_CONFIGS), value=inp.tile, description="tile config", style=style,
                           layout=lay),
        "sm_count": slider("SMs", 16, 192, 1, inp.sm_count),
        "comm_sms": slider("comm SMs", 0, 64, 1, inp.comm_sms),
        "order": w.Dropdown(options=list(RASTER_ORDERS), value=inp.order, description="raster", style=style,
                            layout=lay),
        "swizzle": w.Dropdown(options=[1, 2, 4, 8, 16], value=inp.swizzle, description="swizzle", style=style,
                              layout=lay),
        "link": w.Dropdown(options=[(p.label, k) for k, p in presets().items()], value=inp.link,
                           description="link", style=style, layout=w.Layout(width="620px")),
        "primitive": w.Dropdown(options=list(preset.primitives), value=inp.primitive, description="collective",
                                style=style, layout=lay),
        "world_size": slider("world size", 2, 16, 1, inp.world_size),
        "partition": w.Combobox(options=list(PARTITION_CHOICES), value=str(inp.partition), ensure_option=False,
                                continuous_update=False, description="partition",
                                placeholder="tuned / finest / one group / 1,2,2", style=style, layout=lay),
        "model": w.Dropdown(options=list(MODELS), value=inp.model, description="model", style=style, layout=lay),
    }
    c["world_size"].disabled = preset.measured
    image = w.Image(format="png")
    summary = w.HTML()
    status = w.HTML()
    for name, ctl in c.items():
        ctl.add_class(f"fo-control-{name}")
    image.add_class("fo-explorer-image")
    summary.add_class("fo-explorer-summary")
    status.add_class("fo-explorer-status")
    busy = {"hold": False}

    def current() -> ExplorerInput:
        return ExplorerInput(**{name: ctl.value for name, ctl in c.items()})

    def update(_=None):
        if busy["hold"]:
            return
        try:
            r, png, t = redraw(fig, current(), dpi)
        except ExplorerError as exc:
            status.value = f"<span style='color:#b00'>input error: {exc}</span>"
            return
        image.value = png
        summary.value = f"<b>{r.summary()}</b>"
        status.value = (f"<span style='color:#555'>{r.profile_source}; redraw {1e3 * t['total_s']:.0f} ms "
                        f"(compute {1e3 * t['compute_s']:.0f} ms)</span>")

    def on_link(change):
        p = presets()[change["new"]]
        busy["hold"] = True  # one redraw for the preset's defaults, not one per control
        try:
            c["primitive"].options = list(p.primitives)
            prim = c["primitive"].value if c["primitive"].value in p.primitives else p.primitives[0]
            c["primitive"].value = prim
            c["sm_count"].value = p.sm_count
            c["comm_sms"].value = p.default_comm_sms(prim)
            c["world_size"].value = p.world_size
            c["world_size"].disabled = p.measured
            if p.gpu is not None and not p.gpu.hopper and c["tile"].value.startswith("sm90"):
                c["tile"].value = "portable 128x256x32"  # fits the 99-164 KB of shared memory of sm_80/86/89
        finally:
            busy["hold"] = False
        update()

    def on_primitive(change):
        if not busy["hold"]:
            busy["hold"] = True
            try:
                c["comm_sms"].value = presets()[c["link"].value].default_comm_sms(change["new"])
            finally:
                busy["hold"] = False
            update()

    c["link"].observe(on_link, names="value")
    c["primitive"].observe(on_primitive, names="value")
    for name, ctl in c.items():
        if name not in ("link", "primitive"):
            ctl.observe(update, names="value")
    update()
    rows = [w.HBox([c["M"], c["N"], c["K"], c["dtype"]]),
            w.HBox([c["tile"], c["order"], c["swizzle"], c["model"]]),
            w.HBox([c["sm_count"], c["comm_sms"], c["world_size"], c["partition"]]),
            w.HBox([c["link"], c["primitive"]])]
    box = w.VBox(rows + [summary, status, image])
    box.controls, box.image, box.summary, box.status, box.figure = c, image, summary, status, fig
    return box
