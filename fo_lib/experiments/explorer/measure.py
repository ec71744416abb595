"""Measuring the shown view on a GPU: the tile finish times the GEMM stamps (its probe epilogue's
``%globaltimer``, as :mod:`fo_lib.experiments.wave_pattern` measures them) and one overlapped call on
the emulated link (:class:`fo_lib.comm.loopback.LoopbackCommunicator`, timed by
:meth:`fo_lib.engine.OverlapPlan.timed_run` as :mod:`fo_lib.experiments.timeline` does), beside the
view's modelled waves. The call is compared with what the model predicts for the same partition on
what was measured here: the GEMM's waves as stamped and the emulated link's latency curve (timed once
per built shape), so measured and predicted run on one GPU and one link whatever link the view shows;
the view's own prediction is reported beside them.

:class:`Measurer` holds a backend (the GPU: :class:`CudaBackend`; tests pass a fake) and a cache of
built shapes, so a repeated measure of the same view reuses its operands, compiled kernels and plan.
"""
from __future__ import annotations

import os
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import dataclasses

import numpy as np

from ...predictor import OverlapModel, Prediction
from ...profiles import BandwidthCurve, GemmProfile
from .compute import Explored
from .errors import TILE_CONFIGS

NO_GPU = "needs a CUDA GPU: none visible"


@dataclass(frozen=True)
class Device:
    """What decides whether a view runs here."""

    name: str
    sm_count: int
    capability: tuple[int, int]


def measure_problem(r: Explored, device: Device | None, reason: str = NO_GPU) -> str | None:
    """Why the view ``r`` cannot be measured on ``device`` (one line), or None when it can."""
    if device is None:
        return reason
    if r.inp.tile.startswith("sm90") and tuple(device.capability) != (9, 0):
        major, minor = device.capability
        return (f"tile {r.inp.tile!r} needs compute capability 9.0; the {device.name} has {major}.{minor}: "
                f"pick a 'portable ...' tile")
    if r.grid.ctas > device.sm_count:
        return (f"the view runs {r.grid.ctas} CTAs but the {device.name} has {device.sm_count} SMs: lower 'SMs' "
                f"or raise 'comm SMs'")
    return None


def cache_key(r: Explored) -> tuple:
    """What a built shape depends on: operands, kernel, raster, CTAs, collective, ranks, partition."""
    i = r.inp
    return (i.M, i.N, i.K, i.dtype, i.tile, i.order, i.swizzle, r.grid.ctas, i.primitive, i.world_size,
            tuple(r.chosen.partition))


class ShapeCache:
    """The last ``size`` built shapes by :func:`cache_key` (each holds GPU buffers: bounded)."""

    def __init__(self, size: int = 4):
        self.size, self._items = size, OrderedDict()

    def get(self, key, build):
        """``(value, reused)``: the cached value of ``key``, else ``build()``'s, kept."""
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key], True
        value = build()
        self._items[key] = value
        while len(self._items) > self.size:
            self._items.popitem(last=False)
        return value, False

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class Measured:
    """One measure of a view: per tile (row-major id) the stamped start and end, ms from the first
    tile's start; the overlapped call's spans (:meth:`~fo_lib.engine.OverlapPlan.timed_run` rows)."""

    explored: Explored
    device: str
    tile_start_ms: np.ndarray
    tile_end_ms: np.ndarray
    spans: tuple
    reused: bool
    seconds: float
    predicted: Prediction  # the same partition, modelled on the stamped waves and the link's curve here

    @property
    def model_wave_end_ms(self) -> np.ndarray:
        """The modelled end of each wave: the view's profile, summed."""
        return np.cumsum(self.explored.profile.wave_ms)

    @property
    def measured_ms(self) -> float:
        return max(s["end_ms"] for s in self.spans)

    @property
    def predicted_ms(self) -> float:
        return float(self.predicted.total_ms)

    @property
    def view_predicted_ms(self) -> float:
        """What the view predicts on its own link (and modelled or recorded waves)."""
        return float(self.explored.chosen.total_ms)

    @property
    def difference_ms(self) -> float:
        return self.measured_ms - self.predicted_ms

    def summary(self) -> str:
        """One line: the measured and predicted totals and their difference, and the GEMM's end."""
        r = self.explored
        part = ",".join(map(str, r.chosen.partition))
        return (f"measured {self.measured_ms:.3f} ms vs predicted {self.predicted_ms:.3f} ms "
                f"({self.difference_ms:+.3f} ms, {100 * self.difference_ms / self.predicted_ms:+.1f} %) for "
                f"partition ({part}) on the {self.device}, emulated link of {r.inp.world_size} ranks (predicted "
                f"from the stamped waves and the link's curve timed here; link '{r.inp.link}' predicts "
                f"{self.view_predicted_ms:.3f} ms); last tile {self.tile_end_ms.max():.3f} ms measured vs "
                f"{self.model_wave_end_ms[-1]:.3f} ms modelled; "
                f"{'kernels reused' if self.reused else 'built'}, {self.seconds:.1f} s")


def stamped_profile(r: Explored, tile_end_ms: np.ndarray, device: str) -> GemmProfile:
    """The view's GEMM profile with its wave times taken from the stamps: wave ``w`` ends when its
    last tile does (never before the wave ahead of it)."""
    g = r.grid
    ends = np.maximum.accumulate([float(tile_end_ms[g.tile_wave == w].max()) for w in range(g.num_waves)])
    wave_ms = np.maximum(np.diff(np.concatenate([[0.0], ends])), 1e-6)
    return dataclasses.replace(r.profile, wave_ms=tuple(wave_ms.tolist()), full_ms=float(ends[-1]), gpu=device)


def link_sizes(r: Explored, points: int = 8) -> np.ndarray:
    """Message sizes to time the link at: from the smallest wave's bytes to the whole output's."""
    wave_bytes = np.asarray(r.profile.wave_bytes, dtype=np.float64)
    return np.unique(np.geomspace(max(wave_bytes.min(), 1024.0), wave_bytes.sum(), points).astype(np.int64))


def predict_here(r: Explored, tile_end_ms: np.ndarray, curve: BandwidthCurve, device: str) -> Prediction:
    """The view's partition, predicted by the view's model on the stamped waves and ``curve``."""
    model = OverlapModel(stamped_profile(r, tile_end_ms, device), curve, r.inp.model)
    return model.predict(tuple(r.chosen.partition))


def _median_call(calls: list) -> list:
    return sorted(calls, key=lambda spans: max(s["end_ms"] for s in spans))[len(calls) // 2]


def tile_times(probe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(start_ms, end_ms)`` per tile from a probe ``[tiles, 4]`` (start ns, end ns, SM, CTA), from
    the first tile's start."""
    probe = np.asarray(probe, dtype=np.int64)
    t0 = probe[:, 0].min()
    return (probe[:, 0] - t0) / 1e6, (probe[:, 1] - t0) / 1e6


class Measurer:
    """Measures views on ``backend`` (default :class:`CudaBackend`), reusing built shapes."""

    def __init__(self, backend=None, cache_size: int = 4):
        self.backend = backend if backend is not None else CudaBackend()
        self.cache = ShapeCache(cache_size)

    def problem(self, r: Explored) -> str | None:
        """Why ``r`` cannot be measured here, or None."""
        device, reason = self.backend.device()
        return measure_problem(r, device, reason)

    def measure(self, r: Explored, progress=None, repeats: int = 3) -> Measured:
        """Run the view's GEMM with its probe and the overlapped call ``repeats`` times each; keep the
        call and the probe of median length. ``progress(text)`` hears each step. Raises
        ``RuntimeError`` with :meth:`problem`'s reason when the view cannot run here."""
        say = progress or (lambda text: None)
        why = self.problem(r)
        if why is not None:
            raise RuntimeError(why)
        t0 = time.perf_counter()
        shape, reused = self.cache.get(cache_key(r), lambda: self.backend.build(r, say))
        say("measuring: tile stamps and the overlapped call")
        probes = sorted((shape.probe() for _ in range(repeats)), key=lambda p: int(p[:, 1].max() - p[:, 0].min()))
        start, end = tile_times(probes[len(probes) // 2])
        call = _median_call([shape.timed_call() for _ in range(repeats)])
        device, _ = self.backend.device()
        predicted = predict_here(r, end, shape.link_curve(), device.name)
        return Measured(r, device.name, start, end, tuple(call), reused, time.perf_counter() - t0, predicted)


def no_device_node(dev: Path = Path("/dev"), env=None) -> bool:
    """True where no CUDA GPU can be visible, decided without importing torch (seconds on a small
    CPU box, for a button that stays disabled there): ``CUDA_VISIBLE_DEVICES`` empty or ``-1``, or
    on Linux no NVIDIA device node (``/dev/nvidia0`` ...; WSL's ``/dev/dxg`` counts as one)."""
    hidden = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return True
    if not sys.platform.startswith("linux"):
        return False
    return not (any(dev.glob("nvidia[0-9]*")) or (dev / "dxg").exists())


class CudaBackend:
    """The visible CUDA GPU and the loopback link (one communicator per world size)."""

    def __init__(self):
        self._comms = {}

    def device(self) -> tuple[Device | None, str]:
        if no_device_node():
            return None, NO_GPU
        try:
            import torch
        except ImportError:
            return None, "needs a CUDA GPU: torch is not installed"
        if not torch.cuda.is_available():
            return None, NO_GPU
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        return Device(p.name, int(p.multi_processor_count), (int(p.major), int(p.minor))), ""

    def build(self, r: Explored, progress) -> "CudaShape":
        if r.inp.world_size not in self._comms:
            from ...comm.loopback import LoopbackCommunicator
            self._comms[r.inp.world_size] = LoopbackCommunicator(r.inp.world_size)
        return CudaShape(r, self._comms[r.inp.world_size], progress)


class CudaShape:
    """One view's GPU side, built once: operands, the tile config's probe GEMM and the overlap plan
    (both compiled and run once here, so later measures only time)."""

    def __init__(self, r: Explored, comm, progress):
        import torch

        from ... import gemm
        from ...engine import OverlapPlan

        inp = r.inp
        dtype = torch.bfloat16 if inp.dtype == "bf16" else torch.float16
        self.ctas = r.grid.ctas
        # As a plan on these CTAs runs it (a cluster config on an odd count runs single CTAs).
        self.config = TILE_CONFIGS[inp.tile].with_raster(inp.order, inp.swizzle).whole_waves().for_ctas(self.ctas)
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.a = torch.randn(inp.M, inp.K, device="cuda", generator=gen).to(dtype)
        self.b = torch.randn(inp.N, inp.K, device="cuda", generator=gen).to(dtype)
        self.family = gemm.kernels_for(self.config)
        progress(f"compiling the {inp.tile} GEMM with its tile stamps (first time: tens of seconds)")
        self.probe()
        progress(f"building the overlap plan, partition {list(r.chosen.partition)} (compiles its kernels)")
        routing = None
        if inp.primitive == "all_to_all":
            from ..measure_common import benchmark_routing
            routing = benchmark_routing(inp.M, inp.N, inp.K, comm.world_size)
        self.plan = OverlapPlan(inp.primitive, inp.M, inp.N, inp.K, comm, dtype=inp.dtype, config=self.config,
                                ctas=self.ctas, partition=tuple(r.chosen.partition), routing=routing)
        progress("warming up the overlapped call")
        self.plan.run(self.a, self.b)  # first launches prepare their kernels: outside the timed gate
        torch.cuda.synchronize()
        self.timed_call()
        progress(f"timing the emulated link's {inp.primitive} at {len(link_sizes(r))} message sizes")
        from ...comm.loopback import LoopbackCommunicator
        from ...partition_tuning import measure_curve
        # On a link of its own: timing sizes beyond what the plan reserved would reallocate the
        # staging buffers its captured graphs use.
        self._curve = measure_curve(LoopbackCommunicator(comm.world_size), inp.primitive, link_sizes(r),
                                    dtype=inp.dtype)

    def link_curve(self) -> BandwidthCurve:
        return self._curve

    def probe(self) -> np.ndarray:
        import torch

        _, probe = self.family.gemm_nt_probe(self.a, self.b, config=self.config, ctas=self.ctas)
        torch.cuda.synchronize()
        return probe.cpu().numpy()

    def timed_call(self) -> list:
        return self.plan.timed_run(self.a, self.b)[1]


_DEFAULT: Measurer | None = None


def default_measurer() -> Measurer:
    """The process's measurer: one cache for every explorer widget in it."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Measurer()
    return _DEFAULT
