"""Latency models of an overlapped GEMM + collective, and the partition they choose.

``model="paper"`` is the paper's Algorithm 1 as stated: every wave takes ``w = gemm_ms / T``; group
``i``'s compute ends at ``p_i = w * (g_1 + ... + g_i)``; its communication starts at
``max(p_i, m_{i-1})`` and lasts ``c(bytes of group i)``, a piecewise-linear interpolation of a
sampled latency curve (no extrapolation: a size outside the samples is an error); the total is
``m_P``.

``model="refined"`` keeps the same recurrence and changes its terms:

* per-wave durations from a measured :class:`~fo_lib.profiles.GemmProfile` taken with the SMs that
  communication occupies removed (so the wave count ``T`` is the one under overlap);
* ``c`` = the curve inside its samples, an ``alpha + bytes/beta`` line outside (small-message floor);
* ``launch_ms`` per collective (host enqueue + wait-kernel wake-up);
* ``comm_slowdown`` on collectives that share the GPU with the GEMM, by ``contention``:
  ``"uniform"`` (default) stretches every collective of a group that ends before the last wave;
  ``"gemm_overlap"`` lets a collective progress at ``1 / comm_slowdown`` of its rate for as long
  as the GEMM still computes and at full rate after it (measured timelines show a first group
  crawling beside the GEMM while the groups after its end run at the curve's speed: the loopback
  All-to-All's first group took 1.3x its curve, the next ones 1.0x); ``gemm_slowdown`` on compute
  that shares the GPU with communication (memory-bandwidth contention);
* no overlap is the fastest plain GEMM on every SM (``full_ms``, or cuBLAS's ``baseline_ms`` when
  profiled) followed by one collective: the fallback when no partition wins.

Both models return a :class:`Prediction` with a per-group timeline for plots.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import partition as part_mod
from .profiles import BandwidthCurve, GemmProfile, ProfileError

MODELS = ("paper", "refined")
CONTENTION = ("uniform", "gemm_overlap")


@dataclass(frozen=True)
class GroupTiming:
    group: int
    first_wave: int
    waves: int
    bytes: int
    compute_start: float
    compute_end: float
    comm_start: float
    comm_end: float


@dataclass(frozen=True)
class Prediction:
    partition: tuple[int, ...]
    total_ms: float
    groups: tuple[GroupTiming, ...]
    model: str

    def as_rows(self) -> list[dict]:
        return [vars(g) | {"model": self.model} for g in self.groups]


@dataclass(frozen=True)
class TuneResult:
    """What the tuner chose and what it compared against."""

    best: Prediction          # best overlapped partition (exact DP)
    no_overlap: Prediction
    finest: Prediction
    search_ms: float          # wall time of the search itself

    @property
    def choice(self) -> Prediction:
        """Overlap only where it wins: otherwise fall back to no overlap."""
        return self.best if self.best.total_ms < self.no_overlap.total_ms else self.no_overlap

    @property
    def speedup(self) -> float:
        return self.no_overlap.total_ms / self.choice.total_ms

    def to_dict(self) -> dict:
        return {
            "partition": list(self.choice.partition),
            "predicted_ms": self.choice.total_ms,
            "overlap": len(self.choice.partition) > 1,
            "best_overlapped": {"partition": list(self.best.partition), "predicted_ms": self.best.total_ms},
            "no_overlap": {"partition": list(self.no_overlap.partition),
                           "predicted_ms": self.no_overlap.total_ms},
            "finest": {"partition": list(self.finest.partition), "predicted_ms": self.finest.total_ms},
            "predicted_speedup": self.speedup,
            "model": self.choice.model,
            "num_waves": int(sum(self.choice.partition)),
            "search_ms": self.search_ms,
        }


@dataclass(frozen=True)
class OverlapModel:
    """A latency model for one GEMM profile and one communication curve."""

    profile: GemmProfile
    curve: BandwidthCurve
    model: str = "refined"
    launch_ms: float = 0.0
    comm_slowdown: float = 1.0
    gemm_slowdown: float = 1.0
    contention: str = "uniform"
    _wave_ends: np.ndarray = field(init=False, repr=False, compare=False)
    _byte_prefix: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; choose one of {MODELS}")
        if self.contention not in CONTENTION:
            raise ValueError(f"unknown contention {self.contention!r}; choose one of {CONTENTION}")
        for name in ("launch_ms",):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0")
        for name in ("comm_slowdown", "gemm_slowdown"):
            if not getattr(self, name) >= 1.0:
                raise ValueError(f"{name} must be >= 1 (a slowdown factor)")
        waves = np.asarray(self.profile.wave_ms, dtype=np.float64)
        if self.model == "paper":
            waves = np.full_like(waves, waves.sum() / len(waves))
        else:
            waves = waves * self.gemm_slowdown
        object.__setattr__(self, "_wave_ends", np.concatenate(([0.0], np.cumsum(waves))))
        object.__setattr__(self, "_byte_prefix",
                           np.concatenate(([0], np.cumsum(self.profile.wave_bytes))).astype(np.int64))
        if self.model == "paper":
            self._check_paper_coverage()

    def _check_paper_coverage(self) -> None:
        """Every group size the search may ask for must lie inside the sampled curve."""
        smallest = int(min(self.profile.wave_bytes))
        largest = int(self._byte_prefix[-1])
        for need in (smallest, largest):
            if not self.curve.covers(need):
                raise ProfileError(
                    f"the 'paper' model needs latencies from {smallest} bytes (one wave) to {largest} "
                    f"bytes (all waves), but the curve covers [{self.curve.points[0][0]:.0f}, "
                    f"{self.curve.points[-1][0]:.0f}] bytes; sample a wider curve or use --model refined")

    @property
    def num_waves(self) -> int:
        return self.profile.num_waves

    def group_bytes(self, a: int, b: int) -> int:
        return int(self._byte_prefix[b] - self._byte_prefix[a])

    def comm_ms(self, a, b):
        """Time of the collective over waves ``a .. b-1``, its launch included (scalars or
        broadcastable arrays): with ``contention="uniform"`` stretched if compute still runs beside
        it; with ``"gemm_overlap"`` as if it had the GPU to itself (:meth:`finish` adds the GEMM)."""
        a, b = np.asarray(a), np.asarray(b)
        nbytes = self._byte_prefix[b] - self._byte_prefix[a]
        if self.model == "paper":
            return self.curve.interp_ms(nbytes)
        t = np.asarray(self.curve.latency_ms(nbytes))
        if self.contention == "uniform":
            t = np.where(b < self.num_waves, t * self.comm_slowdown, t)  # compute still runs beside it
        t = t + self.launch_ms
        return float(t) if t.ndim == 0 else t

    @property
    def gemm_end(self) -> float:
        return float(self._wave_ends[-1])

    def finish(self, start, cost):
        """When a collective of :meth:`comm_ms` ``cost`` started at ``start`` ends (vectorised). With
        ``contention="gemm_overlap"``, while the GEMM computes (until :attr:`gemm_end`) it does
        ``1 / comm_slowdown`` of the transfer per ms (its ``launch_ms`` is not slowed); otherwise
        ``start + cost``."""
        start, cost = np.asarray(start, dtype=np.float64), np.asarray(cost, dtype=np.float64)
        if self.model == "paper" or self.contention == "uniform" or self.comm_slowdown == 1.0:
            return start + cost
        # The launch (host enqueue, the wait kernel's wake-up) is not bandwidth: it is not slowed.
        start, cost = start + self.launch_ms, np.maximum(cost - self.launch_ms, 0.0)
        s = self.comm_slowdown
        beside = np.maximum(self.gemm_end - start, 0.0)  # how long the GEMM still runs after the start
        done = beside / s                                 # work done in that time
        return np.where(done >= cost, start + cost * s, start + beside + (cost - done))

    def comm_matrix(self) -> np.ndarray:
        """``[T+1, T+1]`` matrix of :meth:`comm_ms` for every group ``a < b`` (inf elsewhere)."""
        a, b = np.triu_indices(self.num_waves + 1, k=1)
        cost = np.full((self.num_waves + 1,) * 2, np.inf)
        cost[a, b] = self.comm_ms(a, b)
        return cost

    def predict(self, partition) -> Prediction:
        part = part_mod.validate_partition(partition, self.num_waves)
        bounds = part_mod.boundaries(part)
        groups, m = [], 0.0
        for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            start = max(float(self._wave_ends[b]), m)
            m = float(self.finish(start, self.comm_ms(int(a), int(b))))
            groups.append(GroupTiming(i, int(a), int(b - a), self.group_bytes(int(a), int(b)),
                                      float(self._wave_ends[a]), float(self._wave_ends[b]), start, m))
        return Prediction(part, m, tuple(groups), self.model)

    def predict_no_overlap(self) -> Prediction:
        if self.model == "paper":
            return self.predict(part_mod.no_overlap(self.num_waves))
        # The fallback runs the fastest non-overlapped GEMM we have (ours, or cuBLAS when profiled).
        gemm = min(self.profile.full_ms, self.profile.baseline_ms or self.profile.full_ms)
        comm = self.curve.latency_ms(self.group_bytes(0, self.num_waves))
        g = GroupTiming(0, 0, self.num_waves, self.group_bytes(0, self.num_waves), 0.0, gemm, gemm, gemm + comm)
        return Prediction((self.num_waves,), gemm + comm, (g,), self.model)

    def search(self) -> part_mod.SearchResult:
        part_mod.check_search_size(self.num_waves)  # before the [T+1, T+1] cost matrix
        return part_mod.search_exact(self._wave_ends, self.comm_matrix(), finish=self.finish)

    def tune(self) -> TuneResult:
        t0 = time.perf_counter()
        found = self.search()
        search_ms = (time.perf_counter() - t0) * 1e3
        return TuneResult(best=self.predict(found.partition), no_overlap=self.predict_no_overlap(),
                          finest=self.predict(part_mod.finest(self.num_waves)), search_ms=search_ms)


def synthetic_model(num_waves: int, wave_ms: float, bytes_per_wave: int, curve: BandwidthCurve,
                    model: str = "paper", **kw) -> OverlapModel:
    """The model for a uniform synthetic profile (``fo_lib tune --waves ...``)."""
    return OverlapModel(GemmProfile.synthetic(num_waves, wave_ms, bytes_per_wave), curve, model, **kw)


# --- calibration of the refined model against measured partitions ------------------------------
CALIBRATION_GRID = {
    "launch_ms": (0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.16),
    "comm_slowdown": (1.0, 1.05, 1.1, 1.2, 1.3, 1.45, 1.6, 2.0, 2.5, 3.0),
    "gemm_slowdown": (1.0, 1.02, 1.05, 1.08, 1.12, 1.18),
    "contention": ("uniform",),
}


def calibrate(samples, grid: dict | None = None) -> tuple[dict, float]:
    """Fit the refined model's ``launch_ms``, ``comm_slowdown`` and ``gemm_slowdown`` by grid search.

    ``samples``: iterable of ``(profile, curve, partition, measured_ms)``. Minimises the mean
    relative error of the predicted overlapped latency; returns (parameters, that error).
    """
    import itertools

    grid = grid or CALIBRATION_GRID
    samples = list(samples)
    if not samples:
        raise ValueError("calibration needs at least one measured partition")
    keys = list(grid)
    best, best_err = None, float("inf")
    for values in itertools.product(*(grid[k] for k in keys)):
        params = dict(zip(keys, values))
        cache: dict = {}
        err = 0.0
        for profile, curve, part, measured in samples:
            key = (id(profile), id(curve))
            if key not in cache:
                cache[key] = OverlapModel(profile, curve, "refined", **params)
            err += abs(cache[key].predict(part).total_ms - measured) / measured
        err /= len(samples)
        if err < best_err:
            best, best_err = params, err
    return best, best_err
