"""Link presets of the explorer: every measured curve under ``data/`` and two modelled links."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ...profiles import BandwidthCurve, GemmProfile
from ...provenance import DATA_DIR
from .errors import ExplorerError


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
    gpu: GpuSpec | None                       # None: measured (rate fitted per preset)
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
    def measured_gpu(self) -> str:
        """The GPU a measured preset's data set was recorded on (``"H100"`` for ``data/h100``)."""
        return self.key.split()[0].split("/")[0].partition("x")[0].upper()

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


def _gpus(data_set: str) -> str:
    """``"2x H200"`` for the folder ``h200x2`` (``1x`` without a count)."""
    gpu, _, count = data_set.split("/", 1)[0].partition("x")
    return f"{count or 1}x {gpu.upper()}"


def _measured_label(data_set: str, budget, link: str) -> tuple[str, str]:
    sub = data_set.split("/", 1)[1].replace("_", "-") if "/" in data_set else ""
    where = f"[data/{data_set}" + (f": re-measured in the {sub} run]" if sub and budget != "copy_engine" else "]")
    gpus = _gpus(data_set)
    if link == "emulated":
        return f"{data_set} emulated", f"{gpus}, emulated link (2 virtual ranks) {where}"
    if budget == "copy_engine":
        return (f"{data_set} copy engine",
                f"{gpus} NVLink, NCCL copy engines (AllGather per group, summed by the post-reorder) {where}")
    if budget == 0:
        return f"{data_set} nccl", f"{gpus} NVLink, NCCL kernels (default CTAs) {where}"
    return f"{data_set} nccl {budget} ctas", f"{gpus} NVLink, NCCL kernels (<= {budget} CTAs) {where}"


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
