"""The Hopper GEMM's choice of clusters of 2 from a measured tile table, on the CPU: taken where
measured faster, never on an odd CTA count or a single tile row, always in whole waves."""
from dataclasses import replace

import pytest

from fo_lib.gemm import GemmError, sm90
from sm90_tile_tables import BIG, GRID, write_table as _table


def _cluster_rows(ms_c1, ms_c2, grid=GRID, ks=(1024, 4096)):
    """Big-tile rows with and without clusters: a wave takes ``ms_c1`` / ``ms_c2`` at K = 4096."""
    rows = []
    for name, ms, rasters in ((BIG, ms_c1, (("row", 1), ("row", 8))), (BIG + "c2", ms_c2, (("row", 2), ("row", 8)))):
        for order, sw in rasters:
            for k in ks:
                rows.append(dict(config=name, tile_name=sm90.CONFIGS[name].tile_name, order=order, swizzle=sw,
                                 M=grid[0], N=grid[1], K=k, waves=8, ms_per_wave=ms * k / 4096, tflops=1.0))
    return rows


@pytest.mark.parametrize("c2_speed,want", [(0.97, 2), (0.995, 1)])
def test_a_cluster_is_taken_where_it_is_measured_faster_and_ties_go_without(data_dir, c2_speed, want):
    _table(data_dir, _cluster_rows(1.0, c2_speed))
    cfg = sm90.default_config(4096, 8192, 4096, 132)
    assert cfg.cluster == want and not cfg.stream_k
    if want == 2:  # clusters are recorded and ranked in row rasters with an even swizzle (B shared)
        assert cfg.order == "row" and cfg.swizzle % 2 == 0


def test_clusters_are_no_candidates_on_an_odd_cta_count(data_dir):
    _table(data_dir, _cluster_rows(1.0, 0.9))
    assert sm90.default_config(4096, 8192, 4096, 132).cluster == 2
    assert sm90.default_config(4096, 8192, 4096, 131).cluster == 1


def test_a_cluster_pick_runs_whole_waves_and_pairs_tiles_in_one_wave(data_dir):
    # 1536 x 3584: 12 x 14 = 168 big tiles on 132 CTAs (a tail a stream-K config would share).
    _table(data_dir, _cluster_rows(1.0, 0.5))
    cfg = sm90.default_config(1536, 3584, 8192, 132)
    assert cfg.cluster == 2 and not cfg.stream_k
    one_wave = sm90.default_config(1024, 2048, 4096, 132)  # 8 x 8 tiles
    assert one_wave.cluster == 2 and (one_wave.order, one_wave.swizzle) == ("row", 2)


def test_a_cluster_needs_two_tile_rows_to_share_anything(data_dir):
    # One tile row (M <= 128): every pair of CTAs lies in two tile columns, nothing is shared.
    _table(data_dir, _cluster_rows(1.0, 0.5))
    assert sm90.default_config(64, 4096, 4096, 132).cluster == 1
    assert sm90.default_config(256, 4096, 4096, 132).cluster == 2


def test_a_cluster_config_has_no_stream_k_tail():
    c2 = sm90.CONFIGS[BIG + "c2"]
    with pytest.raises(GemmError, match="whole waves"):
        replace(c2, stream_k=True).validate()
    with pytest.raises(GemmError, match="1 or 2"):
        replace(c2, cluster=True).validate()
