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
