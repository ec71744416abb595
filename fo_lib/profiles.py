"""Offline tuning artifacts: a GEMM's wave profile and a collective's latency curve.

Both are versioned JSON documents (``format``/``version`` keys) validated on load, so a stale or
hand-edited file fails with a message that names the problem instead of mis-tuning silently.
A bare ``{"points": [[bytes, ms], ...]}`` is accepted as a bandwidth curve (the CLI's synthetic form).
"""
from __future__ import annotations

import json
import math
import numbers
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._util import atomic_write

GEMM_PROFILE_FORMAT = "fo_lib.gemm_profile"
BANDWIDTH_CURVE_FORMAT = "fo_lib.bandwidth_curve"
SCHEMA_VERSION = 1
PRIMITIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


class ProfileError(ValueError):
    """A profile or curve is malformed or does not fit the question asked of it."""


def _read_json(path: str | Path) -> dict[str, Any]:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ProfileError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ProfileError(f"{path} is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                           f"(line {line})") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} "
                           f"column {exc.colno}") from exc
    except RecursionError:  # the decoder recurses once per level: no profile nests this deep
        raise ProfileError(f"{path}: JSON nested too deeply to be a profile or curve") from None
    except ValueError as exc:  # an integer literal past Python's digit limit
        raise ProfileError(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ProfileError(f"{path}: expected a JSON object at top level, got {type(doc).__name__}")
    return doc


def _is_number(value: Any) -> bool:
    """A real number (Python or NumPy), not a bool or a string that looks like one."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _check_format(doc: dict[str, Any], fmt: str, where: str) -> None:
    if doc.get("format") != fmt:
        raise ProfileError(f"{where}: 'format' is {doc.get('format')!r}, expected {fmt!r}")
    if doc.get("version") != SCHEMA_VERSION:
        raise ProfileError(f"{where}: schema version {doc.get('version')!r} is not supported "
                           f"(this fo_lib reads version {SCHEMA_VERSION})")


def _positive_finite(name: str, value: Any, where: str, allow_zero: bool = False) -> float:
    if not _is_number(value):
        raise ProfileError(f"{where}: {name} must be a number, got {value!r}")
    try:
        x = float(value)
    except OverflowError:  # an integer beyond a float's range
        raise ProfileError(f"{where}: {name} is beyond a float's range (about 1.8e308)") from None
    if not math.isfinite(x) or x < 0 or (x == 0 and not allow_zero):
        raise ProfileError(f"{where}: {name} must be {'non-negative' if allow_zero else 'positive'} "
                           f"and finite, got {value!r}")
    return x


@dataclass(frozen=True)
class BandwidthCurve:
    """Latency of one collective against message size, sampled on one link.

    ``points`` are ``(bytes, ms)`` pairs, bytes strictly increasing. ``bytes`` is the size of the
    buffer handed to the collective (for ReduceScatter the full input, for All-to-All what one rank
    sends).
    """

    points: tuple[tuple[float, float], ...]
    primitive: str = "all_reduce"
    world_size: int = 2
    link: str = "synthetic"
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        where = f"bandwidth curve ({self.primitive}, world {self.world_size}, {self.link})"
        if self.primitive not in PRIMITIVES:
            raise ProfileError(f"{where}: unknown primitive {self.primitive!r}; one of {PRIMITIVES}")
        if not isinstance(self.world_size, numbers.Integral) or isinstance(self.world_size, bool) \
                or self.world_size < 1:
            raise ProfileError(f"{where}: world_size must be a positive integer, got {self.world_size!r}")
        object.__setattr__(self, "world_size", int(self.world_size))
        pts = []
        for i, point in enumerate(self.points):
            if not isinstance(point, (list, tuple, np.ndarray)) or len(point) != 2:
                raise ProfileError(f"{where}: point {i} must be a [bytes, ms] pair, got {point!r}")
            pts.append((_positive_finite(f"bytes of point {i}", point[0], where),
                        _positive_finite(f"ms of point {i}", point[1], where)))
        pts = tuple(pts)
        object.__setattr__(self, "points", pts)
        if len(pts) < 2:
            raise ProfileError(f"{where}: needs at least two points, got {len(pts)}")
        sizes = [b for b, _ in pts]
        if any(b2 <= b1 for b1, b2 in zip(sizes, sizes[1:])):
            raise ProfileError(f"{where}: points must be sorted by strictly increasing bytes")

    @property
    def sizes(self) -> np.ndarray:
        return np.array([b for b, _ in self.points])

    @property
    def times(self) -> np.ndarray:
        return np.array([t for _, t in self.points])

    def falling_points(self) -> list[int]:
        """Indices ``i`` whose latency is below point ``i - 1``'s though it moves more bytes (measurement
        noise or a mislabelled file; interpolation between them predicts that larger is faster)."""
        return [i for i in range(1, len(self.points)) if self.points[i][1] < self.points[i - 1][1]]

    def covers(self, nbytes: float) -> bool:
        return self.points[0][0] <= nbytes <= self.points[-1][0]

    def interp_ms(self, nbytes):
        """Piecewise-linear latency (scalar or array); raises if a size lies outside the samples."""
        x = np.asarray(nbytes, dtype=np.float64)
        lo, hi = self.points[0][0], self.points[-1][0]
        bad = (x < lo) | (x > hi)
        if np.any(bad):
            first = float(x[bad].flat[0]) if x.ndim else float(x)
            raise ProfileError(
                f"message of {first:.0f} bytes is outside the sampled range [{lo:.0f}, {hi:.0f}] bytes "
                f"of the {self.primitive} curve; sample a wider curve (the 'paper' model does not "
                f"extrapolate)")
        t = np.interp(x, self.sizes, self.times)
        return float(t) if t.ndim == 0 else t

    def alpha_beta(self) -> tuple[float, float]:
        """Least-squares ``t = alpha + bytes / beta`` over the points: (alpha ms, beta bytes/ms)."""
        slope, alpha = np.polyfit(self.sizes, self.times, 1)
        slope = max(float(slope), 1e-30)
        return max(float(alpha), 0.0), 1.0 / slope

    def latency_ms(self, nbytes):
        """Latency for any size (scalar or array): interpolated inside the sampled range, the
        ``alpha + bytes/beta`` line above it, and below it the smallest sample's bandwidth but never
        less than ``alpha`` (the small-message floor). Zero bytes cost nothing."""
        x = np.asarray(nbytes, dtype=np.float64)
        alpha, beta = self.alpha_beta()
        (b0, t0), (b1, t1) = self.points[0], self.points[-1]
        inside = np.interp(x, self.sizes, self.times)
        below = np.maximum(alpha, t0 * x / b0)
        above = t1 + (x - b1) / beta
        t = np.where(x < b0, below, np.where(x > b1, above, inside))
        t = np.where(x <= 0, 0.0, t)
        return float(t) if t.ndim == 0 else t

    def bus_bandwidth_gbps(self) -> np.ndarray:
        """NCCL-style bus bandwidth of each point (GB/s), for plots."""
        w = self.world_size
        # all_gather's sizes are what each rank sends (partition_tuning.collective_fn), NCCL's the whole output.
        factor = {"all_reduce": 2 * (w - 1) / w, "reduce_scatter": (w - 1) / w,
                  "all_gather": w - 1, "all_to_all": (w - 1) / w}[self.primitive]
        return self.sizes * factor / (self.times * 1e-3) / 1e9

    # --- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"format": BANDWIDTH_CURVE_FORMAT, "version": SCHEMA_VERSION, "primitive": self.primitive,
                "world_size": self.world_size, "link": self.link,
                "points": [list(p) for p in self.points], "meta": self.meta}

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(Path(path), (json.dumps(self.to_dict(), indent=1) + "\n").encode())

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str = "bandwidth curve") -> "BandwidthCurve":
        if "format" in doc:
            _check_format(doc, BANDWIDTH_CURVE_FORMAT, where)
        points = doc.get("points")
        if not isinstance(points, list):
            raise ProfileError(f"{where}: 'points' must be a list of [bytes, ms] pairs")
        for i, p in enumerate(points):
            if not isinstance(p, list) or len(p) != 2:
                raise ProfileError(f"{where}: point {i} must be a [bytes, ms] pair, got {json.dumps(p)}")
        world_size = doc.get("world_size", 2)
        if isinstance(world_size, float) and world_size.is_integer():
            world_size = int(world_size)
        if not isinstance(doc.get("meta", {}), dict):
            raise ProfileError(f"{where}: 'meta' must be an object")
        try:
            return cls(points=tuple(tuple(p) for p in points), primitive=doc.get("primitive", "all_reduce"),
                       world_size=world_size, link=str(doc.get("link", "synthetic")),
                       meta=doc.get("meta", {}))
        except ProfileError as exc:
            raise ProfileError(f"{where}: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> "BandwidthCurve":
        return cls.from_dict(_read_json(path), where=str(path))


@dataclass(frozen=True)
class GemmProfile:
    """Measured wave timing of one GEMM configuration.

    ``wave_ms[i]`` is the duration of wave ``i`` when the GEMM runs on ``ctas`` persistent CTAs
    (``sm_count - comm_sms`` with one CTA per SM). ``full_ms`` is the plain GEMM on every SM (what
    a non-overlapped run costs). ``wave_bytes[i]`` is the output bytes wave ``i`` produces.
    """

    M: int
    N: int
    K: int
    dtype: str
    config: dict[str, Any]
    sm_count: int
    comm_sms: int
    ctas: int
    wave_ms: tuple[float, ...]
    wave_bytes: tuple[int, ...]
    full_ms: float
    gpu: str = "unknown"
    # torch.matmul (cuBLAS) for the same GEMM on every SM: what the non-overlapped fallback costs when
    # it is faster than our kernel. None: unknown (the fallback is then our own GEMM, full_ms).
    baseline_ms: float | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        where = f"GEMM profile {self.M}x{self.N}x{self.K}"
        for name in ("M", "N", "K", "sm_count", "ctas", "comm_sms"):
            v, low = getattr(self, name), 0 if name == "comm_sms" else 1
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ProfileError(f"{where}: {name} must be an integer >= {low}, got {v!r}")
        if not isinstance(self.dtype, str) or not isinstance(self.config, dict):
            raise ProfileError(f"{where}: dtype must be a string and config an object, "
                               f"got {type(self.dtype).__name__} and {type(self.config).__name__}")
        if not 0 <= self.comm_sms < self.sm_count:
            raise ProfileError(f"{where}: comm_sms must be in [0, {self.sm_count})")
        for name in ("wave_ms", "wave_bytes"):
            if not isinstance(getattr(self, name), (list, tuple, np.ndarray)):
                raise ProfileError(f"{where}: {name} must be a list of numbers, got {getattr(self, name)!r}")
        object.__setattr__(self, "wave_ms", tuple(_positive_finite("wave_ms", w, where) for w in self.wave_ms))
        object.__setattr__(self, "wave_bytes", tuple(int(_positive_finite("wave_bytes", b, where))
                                                     for b in self.wave_bytes))
        if not self.wave_ms:
            raise ProfileError(f"{where}: no waves")
        if len(self.wave_ms) != len(self.wave_bytes):
            raise ProfileError(f"{where}: {len(self.wave_ms)} wave durations but "
                               f"{len(self.wave_bytes)} wave sizes")
        # The predictor sums wave sizes in int64 and durations in float64: refuse what overflows them.
        if sum(self.wave_bytes) >= 2**63:
            raise ProfileError(f"{where}: the waves' bytes add up to 2**63 or more")
        if not math.isfinite(sum(self.wave_ms)):
            raise ProfileError(f"{where}: the waves' durations add up to more than a float holds")
        _positive_finite("full_ms", self.full_ms, where)
        if self.baseline_ms is not None:
            _positive_finite("baseline_ms", self.baseline_ms, where)

    @property
    def num_waves(self) -> int:
        return len(self.wave_ms)

    @property
    def total_ms(self) -> float:
        return float(sum(self.wave_ms))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["wave_ms"], d["wave_bytes"] = list(self.wave_ms), list(self.wave_bytes)
        return {"format": GEMM_PROFILE_FORMAT, "version": SCHEMA_VERSION, **d}

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(Path(path), (json.dumps(self.to_dict(), indent=1) + "\n").encode())

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str = "GEMM profile") -> "GemmProfile":
        _check_format(doc, GEMM_PROFILE_FORMAT, where)
        fields = {k: doc[k] for k in cls.__dataclass_fields__ if k in doc}
        missing = [k for k in ("M", "N", "K", "dtype", "config", "sm_count", "comm_sms", "ctas",
                               "wave_ms", "wave_bytes", "full_ms") if k not in fields]
        if missing:
            raise ProfileError(f"{where}: missing keys {missing}")
        try:
            return cls(**fields)
        except ProfileError as exc:
            raise ProfileError(f"{where}: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> "GemmProfile":
        return cls.from_dict(_read_json(path), where=str(path))

    @classmethod
    def synthetic(cls, num_waves: int, wave_ms: float, bytes_per_wave: int, **kw) -> "GemmProfile":
        """A uniform profile from three numbers (what ``fo_lib tune --waves`` builds)."""
        if not isinstance(num_waves, int) or num_waves < 1:
            raise ProfileError(f"--waves must be a positive integer, got {num_waves!r}")
        _positive_finite("--wave-ms", wave_ms, "synthetic profile")
        _positive_finite("--bytes-per-wave", bytes_per_wave, "synthetic profile")
        if not math.isfinite(wave_ms * num_waves) or bytes_per_wave * num_waves >= 2**63:
            raise ProfileError(f"synthetic profile: {num_waves} waves of {wave_ms:g} ms and {bytes_per_wave} bytes "
                               f"is more than the model adds up (under 2**63 bytes and a finite time in all)")
        defaults = dict(M=1, N=1, K=1, dtype="bf16", config={}, sm_count=132, comm_sms=0, ctas=132,
                        full_ms=wave_ms * num_waves, gpu="synthetic")
        defaults.update(kw)
        return cls(wave_ms=(float(wave_ms),) * num_waves, wave_bytes=(int(bytes_per_wave),) * num_waves,
                   **defaults)
