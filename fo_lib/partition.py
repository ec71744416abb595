"""Wave-group partitions and the exact search over them.

A *partition* of ``T`` waves is a composition ``(g_1, ..., g_P)`` with ``g_i >= 1`` and
``sum g_i = T``: group ``i`` holds waves ``b_{i-1} .. b_i - 1`` where ``b_i = g_1 + ... + g_i``.
There are ``2^(T-1)`` of them (one bit per gap between waves: cut or not).

The overlapped latency of a partition follows the recurrence

    m_0 = 0,   m_i = max(p(b_i), m_{i-1}) + c(b_{i-1}, b_i),   total = m_P,

where ``p(b)`` is the time the first ``b`` waves finish computing and ``c(a, b)`` the time to
communicate the output of waves ``a .. b-1``. ``m_i`` is non-decreasing in ``m_{i-1}``, so the best
way to reach boundary ``b`` only needs the smallest ``m`` at each earlier boundary: a dynamic
program over boundaries finds the least latency in ``O(T^2)`` evaluations of ``c``. Choosing among
tied partitions (fewest groups first) also needs the group count in the state: one more ``O(T^2)``
layer per group of the answer (:func:`search_exact`). :func:`brute_force` evaluates every
composition and is kept as the oracle for tests.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

Partition = tuple[int, ...]
CommCost = Callable[[int, int], float]

BRUTE_FORCE_LIMIT = 24  # 2^23 compositions: beyond this brute force is not a useful oracle

# Relative tolerance within which two latencies tie for :func:`search_exact` (far below any timing
# that matters, far above the rounding of sums over a few hundred waves).
TIE_RTOL = 1e-12

# Largest T the search accepts. Its memory peaks at about SEARCH_BYTES_PER_T2 * (T+1)^2 bytes for
# either model (measured: 35-49 for 'paper' and 'refined', 74-90 for refined with
# contention='gemm_overlap'; the [T+1, T+1] cost matrix and one layer's temporaries), and its work
# is one layer of up to T^2 per group of the answer: at the limit ~0.1 GiB and, in the worst case
# (an answer of ~T/2 groups), ~10 s on a slow CPU; T = 200 takes milliseconds.
MAX_SEARCH_WAVES = 1024
SEARCH_BYTES_PER_T2 = 96


class SearchSizeError(ValueError):
    """The partition search was asked for more waves than :data:`MAX_SEARCH_WAVES`."""


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


@dataclass(frozen=True)
class SearchResult:
    partition: Partition
    latency: float
    evaluated: int  # how many (start, end[, groups]) candidates the search evaluated


def check_search_size(num_waves: int) -> None:
    """Refuse, before allocating anything, a search over more than :data:`MAX_SEARCH_WAVES` waves."""
    if num_waves > MAX_SEARCH_WAVES:
        need = SEARCH_BYTES_PER_T2 * (num_waves + 1) ** 2
        # A count of hundreds of digits is past what a float divides.
        gib = f"~{need / 2**30:.1f} GiB" if num_waves < 10**12 else "more memory than exists"
        raise SearchSizeError(
            f"{num_waves} waves is more than the partition search holds (at most {MAX_SEARCH_WAVES} "
            f"waves; at {num_waves} it would need {gib} and up to T^3 work)")


def _group_ends(partition: Sequence[int], compute_end, comm_cost: CommCost, finish=None) -> list[float]:
    """``[m_1, ..., m_P]``: when each group's collective ends."""
    bounds = boundaries(partition)
    m, ends = 0.0, []
    for a, b in zip(bounds[:-1], bounds[1:]):
        start = max(float(compute_end[b]), m)
        c = comm_cost(int(a), int(b))
        m = start + c if finish is None else float(finish(start, c))
        ends.append(m)
    return ends


def latency(partition: Sequence[int], compute_end: Sequence[float], comm_cost: CommCost, finish=None) -> float:
    """Total latency of one partition under the recurrence in the module docstring.

    ``compute_end[b]`` is ``p(b)`` for ``b = 0..T`` (``compute_end[0]`` is where compute starts).
    """
    return _group_ends(partition, compute_end, comm_cost, finish)[-1]


def tie_threshold(best_latency: float) -> float:
    """Latencies up to this count as tied with ``best_latency`` (see :data:`TIE_RTOL`)."""
    return best_latency + TIE_RTOL * abs(best_latency)


def _cost_matrix(num_waves: int, comm_cost) -> np.ndarray:
    if callable(comm_cost):
        cost = np.full((num_waves + 1, num_waves + 1), np.inf)
        for b in range(1, num_waves + 1):
            for a in range(b):
                cost[a, b] = comm_cost(a, b)
        return cost
    cost = np.asarray(comm_cost, dtype=np.float64)
    if cost.shape != (num_waves + 1, num_waves + 1):
        raise ValueError(f"cost matrix must be {(num_waves + 1,) * 2}, got {cost.shape}")
    return cost


def search_exact(compute_end: Sequence[float], comm_cost: CommCost | np.ndarray, finish=None) -> SearchResult:
    """The partition of least latency, by dynamic programming over group boundaries.

    ``comm_cost`` is either a function ``c(a, b)`` or a ``[T+1, T+1]`` matrix with ``c`` at
    ``[a, b]`` for ``a < b`` (the fast path: vectorised steps, so ``T = 200`` takes milliseconds).
    ``finish(start, cost)`` (vectorised, broadcasting) is when a collective of cost ``cost`` started
    at ``start`` ends (default ``start + cost``); the search stays exact for any ``finish`` that
    never ends earlier when started later, since each state then only needs its earliest finish.

    Ties (the rule :func:`brute_force` applies to every partition):

    1. latencies within :data:`TIE_RTOL` (relative) of the least count as tied, and among them the
       partition with the fewest groups wins (fewer collective launches). The tolerance only absorbs
       float rounding (sums taken in different orders); many partitions tie exactly when compute
       hides the collectives, since ``max(p(b), m)`` then forgets how ``m`` was reached;
    2. among those with that many groups, the least latency (exact comparison);
    3. then the partition whose collectives end earliest, compared from the last group backwards
       (``(m_P, m_{P-1}, ..., m_1)`` lexicographically: most slack before each later group);
    4. then the smaller boundaries, again from the last backwards (``(b_{P-1}, ..., b_1)``).

    A first pass (one boundary per step, ``O(T^2)``) finds the least latency ``L``; then one layer
    per group count ``k`` finds the least latency with exactly ``k`` groups, until a layer reaches
    ``L`` within the tolerance. Keying states by boundary alone is not enough: a prefix that ends
    later can tie at the end with fewer groups. Refuses ``T > MAX_SEARCH_WAVES``.
    """
    p = np.asarray(compute_end, dtype=np.float64)
    num_waves = len(p) - 1
    _check_waves(num_waves)
    check_search_size(num_waves)
    T = num_waves
    cost = _cost_matrix(T, comm_cost)
    fin = (lambda s, c: s + c) if finish is None else finish

    # Pass 1: the least latency, and the group count of one partition that reaches it.
    best = np.full(T + 1, np.inf)
    groups = np.zeros(T + 1, dtype=np.int64)
    first = np.zeros(T + 1, dtype=np.int64)
    best[0] = 0.0
    for b in range(1, T + 1):
        m = fin(np.maximum(p[b], best[:b]), cost[:b, b])
        a = int(np.argmin(m))
        best[b], groups[b], first[b] = m[a], groups[a] + 1, a
    threshold = tie_threshold(float(best[T]))
    evaluated = T * (T + 1) // 2

    # Pass 2: layer k holds, per boundary b, the best prefix of exactly k groups (rules 2-4); rank[b]
    # orders layer k's prefixes by (m_k, m_{k-1}, ..., m_1) for the next layer's rule 3.
    ends = np.full(T + 1, np.inf)
    ends[0] = 0.0
    rank = np.zeros(T + 1, dtype=np.int64)
    backs: list[np.ndarray] = []
    found = None
    floor = ends.copy()  # per boundary, the earliest end with fewer groups than the current layer
    for k in range(1, int(groups[T]) + 1):
        # A prefix of k-1 groups that ends no earlier than one with fewer groups to the same boundary
        # cannot be part of the answer (swap in the shorter one: no later, fewer groups): skip it.
        rows = np.flatnonzero(np.isfinite(ends[:T]))
        if rows.size == 0:
            break
        cols = np.arange(rows[0] + 1, T + 1)
        valid = rows[:, None] < cols[None, :]
        c = np.where(valid, cost[np.ix_(rows, cols)], 0.0)       # no inf-inf in ``finish``
        m = np.where(valid, fin(np.maximum(p[cols][None, :], ends[rows][:, None]), c), np.inf)
        evaluated += int(valid.sum())
        low = m.min(axis=0)
        r = np.where(m == low[None, :], rank[rows][:, None], np.iinfo(np.int64).max)
        pick = np.argmax(r == r.min(axis=0)[None, :], axis=0)      # first: the smallest boundary
        back = np.zeros(T + 1, dtype=np.int64)
        back[cols] = rows[pick]
        new_ends = np.full(T + 1, np.inf)
        new_ends[cols] = np.where(low < floor[cols], low, np.inf)
        floor = np.minimum(floor, new_ends)
        prev_rank = rank[back]
        order = np.lexsort((prev_rank, new_ends))
        step = np.ones(T + 1, dtype=np.int64)
        step[1:] = (new_ends[order][1:] != new_ends[order][:-1]) | (prev_rank[order][1:] != prev_rank[order][:-1])
        step[0] = 0
        rank = np.empty(T + 1, dtype=np.int64)
        rank[order] = np.cumsum(step)
        ends = new_ends
        backs.append(back)
        if ends[T] <= threshold:
            found = k
            break
    if found is None:  # only with a ``finish`` that rounds non-monotonically: pass 1's optimum
        backs, found, total = [first] * int(groups[T]), int(groups[T]), float(best[T])
    else:
        total = float(ends[T])
    part, b = [], T
    for k in range(found, 0, -1):
        a = int(backs[k - 1][b])
        part.append(b - a)
        b = a
    return SearchResult(tuple(reversed(part)), total, evaluated)


def brute_force(compute_end: Sequence[float], comm_cost: CommCost, finish=None) -> SearchResult:
    """Evaluate every composition and apply :func:`search_exact`'s rule directly (the test oracle;
    refuses ``T > BRUTE_FORCE_LIMIT``)."""
    num_waves = len(compute_end) - 1
    _check_waves(num_waves)
    if num_waves > BRUTE_FORCE_LIMIT:
        raise ValueError(f"brute force over 2^{num_waves - 1} partitions is not sensible; "
                         f"use search_exact (limit T <= {BRUTE_FORCE_LIMIT})")
    every = [(part, _group_ends(part, compute_end, comm_cost, finish)) for part in compositions(num_waves)]
    threshold = tie_threshold(min(ends[-1] for _, ends in every))
    tied = [(part, ends) for part, ends in every if ends[-1] <= threshold]
    part, ends = min(tied, key=lambda x: (len(x[0]), x[1][::-1], tuple(boundaries(x[0])[1:-1][::-1])))
    return SearchResult(part, ends[-1], len(every))
