import numpy as np
import pytest
from hypothesis import given, strategies as st

from fo_lib import partition as P


def test_count_and_enumerate():
    for T in range(1, 11):
        parts = list(P.compositions(T))
        assert len(parts) == P.count_partitions(T) == 2 ** (T - 1)
        assert len(set(parts)) == len(parts)
        assert all(sum(p) == T and min(p) >= 1 for p in parts)
    assert list(P.compositions(3)) == [(3,), (2, 1), (1, 2), (1, 1, 1)]


def _instance(T, seed):
    rng = np.random.default_rng(seed)
    wave = rng.uniform(0.05, 1.0, T)
    p = np.concatenate(([0.0], np.cumsum(wave)))
    wb = rng.integers(1, 100, T)
    pref = np.concatenate(([0], np.cumsum(wb)))
    alpha, beta = rng.uniform(0, 0.5), rng.uniform(10, 500)
    convex = rng.random() < 0.5

    def comm(a, b):
        x = pref[b] - pref[a]
        return alpha + (x / beta) ** (1.3 if convex else 0.8)
    return p, comm


@given(T=st.integers(1, 14), seed=st.integers(0, 2**31 - 1))
def test_dp_equals_brute_force(T, seed):
    p, comm = _instance(T, seed)
    dp = P.search_exact(p, comm)
    bf = P.brute_force(p, comm)
    assert dp.latency == pytest.approx(bf.latency, rel=1e-12, abs=1e-12)
    # The DP's partition really achieves the latency it reports.
    assert P.latency(dp.partition, p, comm) == pytest.approx(dp.latency, rel=1e-12)
    assert bf.evaluated == 2 ** (T - 1)


def test_validate_partition_errors():
    with pytest.raises(ValueError, match="covers 3 waves"):
        P.validate_partition((1, 2), 4)
    with pytest.raises(ValueError, match="at least one wave"):
        P.validate_partition((0, 4), 4)
    with pytest.raises(ValueError, match="at least 1"):
        P.validate_partition((), 0)
    with pytest.raises(ValueError, match="not sensible"):
        P.brute_force(np.zeros(40), lambda a, b: 1.0)


def test_search_large_T_is_fast():
    import time
    p, comm = _instance(200, 1)
    t0 = time.perf_counter()
    res = P.search_exact(p, comm)
    assert sum(res.partition) == 200
    # Generous bound (CI machines are slow); the benchmark script reports the real number.
    assert time.perf_counter() - t0 < 5.0


def _integer_instance(T, waves, costs):
    """Integer wave times and an arbitrary integer cost per group: exact ties are common."""
    p = np.concatenate(([0.0], np.cumsum(waves[:T]))).astype(np.float64)
    cost = np.full((T + 1, T + 1), np.inf)
    it = iter(costs)
    for b in range(1, T + 1):
        for a in range(b):
            cost[a, b] = next(it)
    return p, cost


@given(T=st.integers(1, 11), data=st.data())
def test_dp_tie_break_equals_brute_force_on_integer_costs(T, data):
    waves = data.draw(st.lists(st.integers(0, 3), min_size=T, max_size=T))
    costs = data.draw(st.lists(st.integers(0, 4), min_size=T * (T + 1) // 2, max_size=T * (T + 1) // 2))
    p, cost = _integer_instance(T, waves, costs)
    dp = P.search_exact(p, cost)
    bf = P.brute_force(p, lambda a, b: cost[a, b])
    # The whole rule, not just the latency: same partition as the oracle that sorts every partition.
    assert (dp.partition, dp.latency) == (bf.partition, bf.latency)
    fewest = min(len(q) for q in P.compositions(T) if P.latency(q, p, lambda a, b: cost[a, b]) == bf.latency)
    assert len(dp.partition) == fewest


def test_many_tied_partitions_the_fewest_groups_win():
    # Compute hides every collective but the last one-wave group: 62 partitions tie at
    # 8 * 0.25 + c(one wave) = 2.06 ms; the fewest groups among them is 3, not the finest 8.
    from fo_lib.predictor import synthetic_model
    from fo_lib.profiles import BandwidthCurve
    curve = BandwidthCurve(((1e6, 0.01), (8388608, 0.06), (1e9, 5.0)))
    m = synthetic_model(8, 0.25, 8388608, curve, "paper")
    lat = {q: m.predict(q).total_ms for q in P.compositions(8)}
    tied = [q for q, t in lat.items() if t == min(lat.values())]
    assert len(tied) == 62 and min(lat.values()) == pytest.approx(2.06)
    res = m.search()
    assert len(res.partition) == min(map(len, tied)) == 3
    assert res.partition == (6, 1, 1) == P.brute_force(m._wave_ends, m.comm_ms).partition
    assert m.tune().choice.partition == (6, 1, 1)


def test_ties_within_tolerance_only():
    # (1, 1) ends at 1.0, (2,) one ulp later: a rounding-level difference is a tie, fewer groups win.
    p = np.zeros(3)
    cost = np.full((3, 3), np.inf)
    cost[0, 1], cost[1, 2] = 0.0, 1.0
    cost[0, 2] = np.nextafter(1.0, 2.0)
    assert cost[0, 2] - 1.0 <= P.TIE_RTOL
    for search in (P.search_exact(p, cost), P.brute_force(p, lambda a, b: cost[a, b])):
        assert search.partition == (2,) and search.latency == cost[0, 2]
    # A real difference (well above TIE_RTOL) is not a tie: the faster partition wins.
    cost[0, 2] = 1.0 + 1e-9
    for search in (P.search_exact(p, cost), P.brute_force(p, lambda a, b: cost[a, b])):
        assert search.partition == (1, 1) and search.latency == 1.0


def test_search_size_limit():
    import time
    T = P.MAX_SEARCH_WAVES + 1
    t0 = time.perf_counter()
    with pytest.raises(P.SearchSizeError, match=f"at most {P.MAX_SEARCH_WAVES} waves"):
        P.search_exact(np.arange(T + 1.0), lambda a, b: 1.0)
    assert time.perf_counter() - t0 < 1.0
    # The limit itself still searches (a cheap instance: two groups win).
    T = P.MAX_SEARCH_WAVES
    p = np.arange(T + 1.0)
    a, b = np.triu_indices(T + 1, k=1)
    cost = np.full((T + 1, T + 1), np.inf)
    cost[a, b] = 1e-3 * (b - a)
    res = P.search_exact(p, cost)
    assert sum(res.partition) == T and res.partition[-1] == 1
