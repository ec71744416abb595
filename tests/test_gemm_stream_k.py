"""The stream-K planning of fo_lib.gemm.stream_k: which tail tiles are shared, split or run in
unequal runs, and what the busiest CTA costs."""
import numpy as np
import pytest

from fo_lib.tiling import raster_tile


def test_stream_k_plan_splits_only_a_small_tail_into_equal_k_ranges():
    from fo_lib.gemm.stream_k import (STREAM_K_MAX_SPLIT, STREAM_K_MIN_PART_KBLOCKS, stream_k_plan,
                                     stream_k_tiles)
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(5000):
        ctas = int(rng.integers(1, 140))
        tiles = int(rng.integers(1, 6 * ctas + 2))
        kb = int(rng.integers(1, 300))
        sk, split = stream_k_plan(tiles, ctas, kb)
        runs = stream_k_tiles(tiles, ctas)
        if runs == 0:
            assert (sk, split) == (0, 0)
            continue
        seen.add(min(split, 2))
        if split == 1:
            assert sk == runs
            continue
        # The partial last wave, each tile in `split` k ranges of at least the minimum, one per CTA.
        assert sk == tiles % ctas and 2 <= split <= STREAM_K_MAX_SPLIT and sk * split <= ctas
        bounds = [j * kb // split for j in range(split + 1)]
        assert bounds[0] == 0 and bounds[-1] == kb
        assert min(b - a for a, b in zip(bounds, bounds[1:])) >= STREAM_K_MIN_PART_KBLOCKS
    assert seen == {1, 2}


def test_weighted_runs_cover_the_tail_and_even_out_every_ctas_cost():
    """stream_k_weighted over random grids and costs: the bounds cover the tail's k-blocks in runs of
    at least a tile, and every CTA's whole tiles plus its run cost the same (to a k-block's rounding),
    which stream_k_finish, the busiest CTA's cost, reads back; without weights it is stream_k_plan's."""
    from fo_lib.gemm.stream_k import stream_k_finish, stream_k_tiles, stream_k_weighted
    rng = np.random.default_rng(1)
    found = 0
    for _ in range(400):
        ctas = int(rng.integers(2, 140))
        tiles = int(rng.integers(ctas + 1, 6 * ctas))
        kb = int(rng.integers(4, 200))
        cost = np.where(rng.random(tiles) < 0.2, rng.uniform(0.3, 1.0), 1.0)
        got = stream_k_weighted(tiles, ctas, kb, cost)
        if stream_k_tiles(tiles, ctas) == 0:
            assert got is None
            continue
        if got is None:  # a run would be shorter than a tile
            continue
        found += 1
        sk, bounds, finish = got
        assert bounds[0] == 0 and bounds[-1] == sk * kb and np.diff(bounds).min() >= kb
        dp = tiles - sk
        whole = np.bincount(np.arange(dp) % ctas, weights=cost[:dp], minlength=ctas)
        kcost = np.concatenate(([0], np.cumsum(np.repeat(cost[dp:], kb) / kb)))
        per = whole + np.diff(kcost[bounds])
        assert np.allclose(per, finish, atol=1.0 / kb + 1e-9)
        equal = stream_k_finish(tiles, ctas, kb, cost, sk, 1)  # equal runs: never better than weighted
        assert equal >= finish - 1.0 / kb
        ones = np.ones(tiles)
        assert stream_k_finish(tiles, ctas, kb, ones, sk, 1) == pytest.approx(tiles / ctas, abs=1.0 / kb)
    assert found > 100


def test_weighted_runs_refuse_bad_costs_and_a_run_shorter_than_a_tile():
    from fo_lib.gemm.stream_k import stream_k_weighted
    assert stream_k_weighted(5, 2, 4, [1, 1, 1, 1]) is None  # one cost per tile
    assert stream_k_weighted(5, 2, 4, [1, 1, 1, 1, 0]) is None  # costs in (0, 1]
    assert stream_k_weighted(5, 2, 4, [1, 1, 1, 1, 1.5]) is None
    # CTA 0's whole tile costs 0.1, CTA 1's 1, the run 0.9: CTA 1's run would cost nothing.
    assert stream_k_weighted(5, 2, 4, [0.1, 1, 0.3, 0.3, 0.3]) is None
    assert stream_k_weighted(5, 2, 4, [1, 1, 1, 1, 0.5])[1].tolist() == [0, 5, 12]


def test_a_short_last_tile_row_costs_less_where_the_raster_puts_it():
    from fo_lib.gemm.stream_k import last_row_costs
    cost = last_row_costs(3, 4, "row", 2, 0.5)
    tm, _ = raster_tile(np.arange(12), 3, 4, "row", 2)
    assert list(cost) == [0.5 if t == 2 else 1.0 for t in tm] and (cost == 0.5).sum() == 4
