import numpy as np
import pytest
from hypothesis import given, strategies as st

from fo_lib.tiling import TileGrid, raster_tile


@given(tm=st.integers(1, 40), tn=st.integers(1, 40), order=st.sampled_from(["row", "col"]),
       swizzle=st.integers(1, 9))
def test_raster_visits_every_tile_once(tm, tn, order, swizzle):
    a, b = raster_tile(np.arange(tm * tn), tm, tn, order, swizzle)
    assert a.min() >= 0 and a.max() < tm and b.min() >= 0 and b.max() < tn
    ids = a * tn + b
    assert np.array_equal(np.sort(ids), np.arange(tm * tn))


def test_raster_known_orders():
    # row, swizzle 1: row-major; col, swizzle 1: column-major (M fastest).
    a, b = raster_tile(np.arange(6), 2, 3, "row", 1)
    assert list(zip(a, b)) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    a, b = raster_tile(np.arange(6), 2, 3, "col", 1)
    assert list(zip(a, b)) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    # row, swizzle 2 on a 3x2 grid: band of rows {0,1} walked column by column, then row 2.
    a, b = raster_tile(np.arange(6), 3, 2, "row", 2)
    assert list(zip(a, b)) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]


def test_paper_wave_count_and_tails():
    # The paper's Fig. 3: M=2048, N=K=8192 in 128x256 tiles on 128 SMs -> 512 tiles, 4 waves.
    g = TileGrid(2048, 8192, BM=128, BN=256, sm_count=128)
    assert (g.num_tiles, g.num_waves) == (512, 4)
    assert g.tiles_per_wave.tolist() == [128] * 4
    # 132 SMs with 4 taken by communication behaves the same.
    assert TileGrid(2048, 8192, BM=128, BN=256, sm_count=132, comm_sms=4).num_waves == 4
    g = TileGrid(300, 200, BM=128, BN=128, sm_count=4)
    assert (g.tiles_m, g.tiles_n, g.num_waves) == (3, 2, 2)
    assert g.tile_elements().sum() == 300 * 200
    assert g.wave_elements().sum() == 300 * 200
    assert g.tile_rows(5) == 300 - 256 and g.tile_cols(5) == 200 - 128


@given(M=st.integers(1, 3000), N=st.integers(1, 3000), sms=st.integers(1, 140),
       order=st.sampled_from(["row", "col"]), swizzle=st.integers(1, 8))
def test_waves_partition_tiles(M, N, sms, order, swizzle):
    g = TileGrid(M, N, BM=128, BN=128, sm_count=sms, order=order, swizzle=swizzle)
    counts = np.bincount(g.tile_wave, minlength=g.num_waves)
    assert counts.tolist() == g.tiles_per_wave.tolist()
    assert np.all(counts[:-1] == g.ctas)
    for w in range(g.num_waves):
        assert np.all(g.tile_wave[g.wave_tiles(w)] == w)


@pytest.mark.parametrize("kw, msg", [
    (dict(M=0, N=8), "M must be positive"),
    (dict(M=8, N=-1), "N must be positive"),
    (dict(M=8, N=8, BM=100), "impossible"),
    (dict(M=8, N=8, order="diag"), "raster order"),
    (dict(M=8, N=8, sm_count=8, comm_sms=8), "comm_sms"),
    (dict(M=8, N=8, swizzle=0), "swizzle must be positive"),
])
def test_bad_grids(kw, msg):
    with pytest.raises(ValueError, match=msg):
        TileGrid(**kw)


def test_describe_counts_one_wave_in_the_singular():
    assert TileGrid(128, 128, BM=128, BN=128, sm_count=4).describe().count("-> 1 wave ") == 1
    assert "-> 2 waves" in TileGrid(256, 512, BM=128, BN=128, sm_count=4).describe()
