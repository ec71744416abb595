"""Wave-group partitions and the exact search over them.

A *partition* of ``T`` waves is a composition ``(g_1, ..., g_P)`` with ``g_i >= 1`` and
``sum g_i = T``: group ``i`` holds waves ``b_{i-1} .. b_i - 1`` where ``b_i = g_1 + ... + g_i``.
There are ``2^(T-1)`` of them (one bit per gap between waves: cut or not).

The overlapped latency of a partition follows the recurrence

    m_0 = 0,   m_i = max(p(b_i), m_{i-1}) + c(b_{i-1}, b_i),   total = m_P,

where ``p(b)`` is the time the first ``b`` waves finish computing and ``c(a, b)`` the time to
communicate the output of waves ``a .. b-1``. ``m_i`` is non-decreasing in ``m_{i-1}``, so the best
way to reach boundary ``b`` only needs the smallest ``m`` at each earlier boundary: a dynamic
program over boundaries is exact in ``O(T^2)`` evaluations of ``c``. :func:`brute_force` evaluates
every composition and is kept as the oracle for tests.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

Partition = tuple[int, ...]
CommCost = Callable[[int, int], float]

BRUTE_FORCE_LIMIT = 24  # 2^23 compositions: beyond this brute force is not a useful oracle


def _check_waves(num_waves: int) -> None:
    if not isinstance(num_waves, (int, np.integer)) or isinstance(num_waves, bool):
        raise TypeError(f"number of waves must be an integer, got {num_waves!r}")
    if num_waves < 1:
        raise ValueError(f"number of waves must be at least 1, got {num_waves}")


def validate_partition(partition: Sequence[int], num_waves: int) -> Partition:
    """Return ``partition`` as a tuple, or raise naming what is wrong with it."""
    _check_waves(num_waves)
    part = tuple(int(g) for g in partition)
    if not part:
        raise ValueError("a partition needs at least one group")
    if any(g < 1 for g in part):
        raise ValueError(f"every group needs at least one wave: {part}")
    if sum(part) != num_waves:
        raise ValueError(f"partition {part} covers {sum(part)} waves, the GEMM has {num_waves}")
    return part


def count_partitions(num_waves: int) -> int:
    _check_waves(num_waves)
    return 2 ** (num_waves - 1)


def from_cuts(cuts) -> Partition:
    """The partition whose group boundaries are the gaps marked True (``T - 1`` flags for ``T`` waves)."""
    part, size = [], 1
    for cut in cuts:
        if cut:
            part.append(size)
            size = 1
        else:
            size += 1
    part.append(size)
    return tuple(part)


def compositions(num_waves: int) -> Iterator[Partition]:
    """All ``2^(T-1)`` partitions of ``T`` waves, from one group ``(T,)`` to the finest ``(1,)*T``."""
    _check_waves(num_waves)
    for cuts in itertools.product((False, True), repeat=num_waves - 1):
        yield from_cuts(cuts)


def boundaries(partition: Sequence[int]) -> np.ndarray:
    """``[0, b_1, ..., b_P]``: the wave index where each group starts, plus the end."""
    return np.concatenate(([0], np.cumsum(partition))).astype(np.int64)


def group_of_wave(partition: Sequence[int]) -> np.ndarray:
    """Group index of each wave."""
    return np.repeat(np.arange(len(partition)), partition)


def finest(num_waves: int) -> Partition:
    _check_waves(num_waves)
    return (1,) * num_waves


def no_overlap(num_waves: int) -> Partition:
    _check_waves(num_waves)
    return (num_waves,)


def latency(partition: Sequence[int], compute_end: Sequence[float], comm_cost: CommCost) -> float:
    """Total latency of one partition under the recurrence in the module docstring.

    ``compute_end[b]`` is ``p(b)`` for ``b = 0..T`` (``compute_end[0]`` is where compute starts).
    """
    bounds = boundaries(partition)
    m = 0.0
    for a, b in zip(bounds[:-1], bounds[1:]):
        m = max(float(compute_end[b]), m) + comm_cost(int(a), int(b))
    return m


@dataclass(frozen=True)
class SearchResult:
    partition: Partition
    latency: float
    evaluated: int  # how many comm-cost evaluations / candidates the search used


def search_exact(compute_end: Sequence[float], comm_cost: CommCost | np.ndarray, finish=None) -> SearchResult:
    """The partition of least latency, by dynamic programming over group boundaries.

    ``comm_cost`` is either a function ``c(a, b)`` or a ``[T+1, T+1]`` matrix with ``c`` at
    ``[a, b]`` for ``a < b`` (the fast path: each boundary is one vectorised step, so ``T = 200``
    takes milliseconds). Ties go to the partition with fewer groups (fewer collective launches).
    ``finish(start, cost)`` (vectorised) is when a collective of cost ``cost`` started at ``start``
    ends (default ``start + cost``); the search stays exact for any ``finish`` that never ends
    earlier when started later, since each boundary then only needs its earliest finish.
    """
    p = np.asarray(compute_end, dtype=np.float64)
    num_waves = len(p) - 1
    _check_waves(num_waves)
    if callable(comm_cost):
        cost = np.full((num_waves + 1, num_waves + 1), np.inf)
        for b in range(1, num_waves + 1):
            for a in range(b):
                cost[a, b] = comm_cost(a, b)
    else:
        cost = np.asarray(comm_cost, dtype=np.float64)
        if cost.shape != (num_waves + 1, num_waves + 1):
            raise ValueError(f"cost matrix must be {(num_waves + 1,) * 2}, got {cost.shape}")
    best = np.full(num_waves + 1, np.inf)
    groups = np.zeros(num_waves + 1, dtype=np.int64)
    back = np.zeros(num_waves + 1, dtype=np.int64)
    best[0] = 0.0
    for b in range(1, num_waves + 1):
        start = np.maximum(p[b], best[:b])
        m = start + cost[:b, b] if finish is None else finish(start, cost[:b, b])
        ties = np.flatnonzero(m == m.min())
        a = int(ties[np.argmin(groups[ties])])
        best[b], back[b], groups[b] = m[a], a, groups[a] + 1
    part, b = [], num_waves
    while b > 0:
        part.append(int(b - back[b]))
        b = int(back[b])
    return SearchResult(tuple(reversed(part)), float(best[num_waves]), num_waves * (num_waves + 1) // 2)


def brute_force(compute_end: Sequence[float], comm_cost: CommCost) -> SearchResult:
    """Evaluate every composition (test oracle; refuses ``T > BRUTE_FORCE_LIMIT``)."""
    num_waves = len(compute_end) - 1
    _check_waves(num_waves)
    if num_waves > BRUTE_FORCE_LIMIT:
        raise ValueError(f"brute force over 2^{num_waves - 1} partitions is not sensible; "
                         f"use search_exact (limit T <= {BRUTE_FORCE_LIMIT})")
    best: SearchResult | None = None
    count = 0
    for part in compositions(num_waves):
        count += 1
        t = latency(part, compute_end, comm_cost)
        if best is None or t < best.latency or (t == best.latency and len(part) < len(best.partition)):
            best = SearchResult(part, t, 0)
    assert best is not None
    return SearchResult(best.partition, best.latency, count)
