"""fo_lib.testing.round_orders: the order of the benchmark's variants in each interleaved round."""
import pytest

from fo_lib.testing import round_orders

NAMES = ["torch", "ours", "signal", "scatter", "ours_again"]


def test_alternate_reverses_every_other_round():
    orders = round_orders(NAMES, 4, "alternate")
    assert orders == [NAMES, NAMES[::-1], NAMES, NAMES[::-1]]


def test_shuffle_runs_every_variant_once_a_round_and_moves_them():
    orders = round_orders(NAMES, 40, "shuffle", seed=(3, 1024, 4096, 1024))
    assert all(sorted(o) == sorted(NAMES) for o in orders)
    # Over 40 rounds every variant sits in every place (a fixed order would keep one place).
    for name in NAMES:
        assert {o.index(name) for o in orders} == set(range(len(NAMES)))
    assert len({tuple(o) for o in orders}) > 10


def test_shuffle_is_reproducible_and_the_seed_matters():
    a = round_orders(NAMES, 10, "shuffle", seed=(0, 1, 2, 3))
    assert a == round_orders(NAMES, 10, "shuffle", seed=(0, 1, 2, 3))
    assert a != round_orders(NAMES, 10, "shuffle", seed=(1, 1, 2, 3))


def test_unknown_order_is_an_error():
    with pytest.raises(ValueError, match="order must be"):
        round_orders(NAMES, 2, "random")


def test_a_nested_seed_is_the_same_as_its_flat_ints():
    # Benchmarks nest their own seed inside a per-shape tuple (check_and_time adds M, N, K).
    flat = round_orders(NAMES, 10, "shuffle", seed=(0, 1, 2, 3))
    assert round_orders(NAMES, 10, "shuffle", seed=((0, 1), 2, [3])) == flat
