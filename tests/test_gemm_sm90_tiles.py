"""The Hopper GEMM's config choice from a measured tile table (fo_lib.gemm.tile_table), on the CPU with
synthetic tables in a temporary data folder: the choice follows the table, tails cost whole tiles,
no table falls back to the documented guess, and a bad table is refused naming its file and line."""
from dataclasses import replace

import pytest

from fo_lib.gemm import GemmError, pick_by_waves, sm90, tile_table
from fo_lib.gemm.sm90 import pick as sm90_pick
from sm90_tile_tables import BIG, SMALL, table_rows as _rows, write_csv as _write, write_table as _table


def _guess(M, N, K):
    return pick_by_waves({n: sm90.CONFIGS[n] for n in (BIG, SMALL)}, sm90_pick._TILE_SPEED, M, N, K, 132, 227 * 1024)


def test_the_choice_follows_the_measured_wave_times(data_dir, monkeypatch):
    # 16896 x 384: 264 tiles of 128 x 256 (N padded to 512; 2 waves) or 396 of 128 x 128 (3 waves).
    M, N, K = 128 * 132, 384, 4096
    _table(data_dir, _rows(lambda o, s: 1.0, lambda o, s: 0.6))  # small: 3 x 0.6 = 1.8 < 2 x 1.0
    assert sm90.default_config(M, N, K, 132).BN == 128
    other = _write(data_dir / "other.csv", _rows(lambda o, s: 1.0, lambda o, s: 0.7))  # 2.1 > 2.0
    monkeypatch.setenv(tile_table.ENV_VAR, str(other))
    assert sm90.default_config(M, N, K, 132).BN == 256


def test_equal_times_are_a_tie_that_goes_to_the_bigger_tile_then_the_wider_swizzle(data_dir):
    # 4224 x 8192: 33 x 32 = 1056 big tiles (8 waves) or 2112 small ones (16 waves), full waves
    # both; a small wave costs half a big one less 0.5 % after the smaller tile's margin: a tie.
    small = 0.5 * (1 - 0.5 * tile_table.TIE) / (1 + tile_table.SMALLER_TILE_MARGIN)
    _table(data_dir, _rows(lambda o, s: 1.0, lambda o, s: small))
    cfg = sm90.default_config(4224, 8192, 4096, 132)
    assert (cfg.BN, cfg.order, cfg.swizzle, cfg.stream_k) == (256, "row", 8, False)
    # Just outside the tie the small tile wins.
    _table(data_dir, _rows(lambda o, s: 1.0, lambda o, s: small * (1 - 2 * tile_table.TIE)))
    assert sm90.default_config(4224, 8192, 4096, 132).BN == 128


def test_a_partial_last_wave_is_shared_by_every_cta_where_stream_k_pays(data_dir, monkeypatch):
    # 1536 x 3584 with 128 x 256 tiles: 12 x 14 = 168 tiles on 132 CTAs, 2 waves with whole waves.
    # With 128 k-blocks the 36 tiles of the last wave are each split in 3 k ranges (108 CTAs): 1/3
    # of a wave; with 7 k-blocks (parts would be too short) all 168 (the partial wave and one full
    # wave) are spread over every CTA as runs.
    assert tile_table.waves(168, 132, False, 128) == 2
    fix, split_fix = tile_table.STREAM_K_FIXUP, tile_table.STREAM_K_SPLIT_FIXUP
    assert tile_table.waves(168, 132, True, 128) == pytest.approx(1 + (1 + split_fix) / 3)
    assert tile_table.waves(168, 132, True, 7) == pytest.approx(168 / 132 * (1 + fix))
    # 400 tiles: 3 whole waves and the last 4 in 4 parts each; or 2 whole waves and 4 + 132 as runs.
    assert tile_table.waves(400, 132, True, 128) == pytest.approx(3 + (1 + split_fix) / 4)
    assert tile_table.waves(400, 132, True, 7) == pytest.approx(2 + 136 / 132 * (1 + fix))
    # Full or nearly full last waves keep whole waves.
    assert tile_table.waves(264, 132, True, 128) == tile_table.waves(900, 132, True, 128) - 5 == 2
    _table(data_dir, _rows(lambda o, s: 1.0, lambda o, s: 0.6))
    cfg = sm90.default_config(1536, 3584, 8192, 132)
    assert cfg.stream_k and cfg.BN == 256  # 1.37 waves of 1.0 against 3 of 0.6 (336 small tiles)
    assert sm90.predict_ms(cfg, 1536, 3584, 8192, 132) == pytest.approx((1 + (1 + split_fix) / 3) * 2.0)
    assert sm90.predict_ms(replace(cfg, stream_k=False), 1536, 3584, 8192, 132) == pytest.approx(2 * 2.0)
    # In whole waves (the overlap engine's choice) the small tile wins: 3 x 1.2 x 1.05 < 2 x 2.0. The
    # engine must get that, not the stream-K pick with its tail switched off.
    whole = sm90.default_config(1536, 3584, 8192, 132, stream_k=False)
    assert (whole.BN, whole.stream_k) == (128, False)
    # Where the tail would cost more than the idle SMs it fills, whole waves win: 128 x 128 tiles
    # only (big ones twice as slow per area), 1664 x 3584 = 364 tiles: 3 whole waves, or 1 whole
    # wave + 232 tiles shared, which costs 1 + 232 / 132 x (1 + fixup) waves.
    _table(data_dir, _rows(lambda o, s: 2.0, lambda o, s: 0.5))
    monkeypatch.setattr(tile_table, "STREAM_K_FIXUP", 0.2)  # 3.11 waves: whole waves win
    cfg = sm90.default_config(1664, 3584, 8192, 132)
    assert (cfg.BN, cfg.stream_k) == (128, False)
    monkeypatch.setattr(tile_table, "STREAM_K_FIXUP", 0.1)  # 2.93 waves (another M: not cached)
    cfg = sm90.default_config(1663, 3584, 8192, 132)
    assert (cfg.BN, cfg.stream_k) == (128, True)


def test_the_fastest_recorded_raster_comes_with_the_tile(data_dir):
    rasters = (("row", 1), ("row", 4), ("col", 2), ("col", 8))
    _table(data_dir, _rows(lambda o, s: 0.9 if (o, s) == ("col", 2) else 1.0, lambda o, s: 0.6, rasters))
    cfg = sm90.default_config(8192, 8192, 4096, 132)  # 2048 big tiles: 16 waves; small 32 x 0.6
    assert (cfg.BN, cfg.order, cfg.swizzle) == (256, "col", 2)
    assert sm90.predict_ms(cfg, 8192, 8192, 4096, 132) == pytest.approx(16 * 0.9)
    # A raster the table lacks (a caller's own): the best recorded one.
    assert sm90.predict_ms(cfg.with_raster("row", 8), 8192, 8192, 4096, 132) == pytest.approx(16 * 0.9)
    assert sm90.predict_ms(cfg.with_raster("row", 4), 8192, 8192, 4096, 132) == pytest.approx(16 * 1.0)
    with pytest.raises(GemmError, match="no rows for 128x176x64pd"):  # a config the table lacks
        sm90.predict_ms(sm90.CONFIGS["128x176x64pd"], 8192, 8192, 4096, 132)


def test_a_swizzle_wider_than_the_grid_is_not_a_candidate(data_dir):
    # row swizzle 8 recorded fastest, but 512 x 16384 has only 4 tile rows: bands of 8 would walk
    # column-major, which is not what was recorded.
    _table(data_dir, _rows(lambda o, s: 0.8 if s == 8 else 1.0, lambda o, s: 10.0))
    cfg = sm90.default_config(512, 16384 * 4, 4096, 132)
    assert (cfg.order, cfg.swizzle) == ("row", 1)
    assert sm90.default_config(4096, 16384, 4096, 132).swizzle == 8


def test_tails_count_as_whole_tiles(data_dir):
    _table(data_dir, _rows(lambda o, s: 1.0, lambda o, s: 0.5))
    big = sm90.CONFIGS[BIG].with_raster("row", 1)
    # 132 tiles of 128 x 256 fill one wave; one more row of M adds a tile row: a second wave.
    assert sm90.predict_ms(big, 128 * 132, 256, 4096, 132) == pytest.approx(1.0)
    assert sm90.predict_ms(big, 128 * 132 + 1, 256, 4096, 132) == pytest.approx(2.0)
    # So in whole waves the tail flips the choice: 133 big tiles (2 waves, 2.0) against 266 small
    # ones (3 x 0.5)...
    whole = {n: sm90.CONFIGS[n] for n in (BIG, SMALL)}
    table = tile_table.load(data_dir / "h200" / tile_table.TABLE_NAME, sm90.CONFIGS)
    assert tile_table.pick(table, whole, 128 * 132, 256, 4096, 132, 227 * 1024).BN == 256
    assert tile_table.pick(table, whole, 128 * 132 + 1, 256, 4096, 132, 227 * 1024).BN == 128
    # ... while with stream-K tails both shrink: 133 big tiles shared by 132 CTAs (1.16 waves x 1.0)
    # against 1 whole small wave + 134 tiles shared (2.17 x 0.5, x 1.05 for the smaller tile: 1.14).
    assert sm90.default_config(128 * 132, 256, 4096, 132).stream_k is False  # a full wave: no tail
    cfg = sm90.default_config(128 * 132 + 1, 256, 4096, 132)
    assert (cfg.BN, cfg.stream_k) == (128, True)
    assert (1 + 134 / 132 * (1 + tile_table.STREAM_K_FIXUP)) * 0.5 * 1.05 < 133 / 132 * (1 + tile_table.STREAM_K_FIXUP)


def test_wave_time_is_interpolated_in_k_and_extrapolated_beyond():
    ks, ms = (1024, 4096, 8192), (0.3, 1.0, 2.0)
    assert tile_table.interpolate_k(ks, ms, 4096) == pytest.approx(1.0)
    assert tile_table.interpolate_k(ks, ms, 2048) == pytest.approx(0.3 + 0.7 / 3)
    assert tile_table.interpolate_k(ks, ms, 16384) == pytest.approx(4.0)  # the last segment's slope
    assert tile_table.interpolate_k(ks, ms, 512) == pytest.approx(0.3 - 0.7 / 6)
    assert tile_table.interpolate_k((4096,), (1.0,), 2048) == pytest.approx(0.5)


def test_the_recorded_grid_nearest_in_aspect_is_used(data_dir):
    wide = _rows(lambda o, s: 2.0, lambda o, s: 1.0, grid=(2048, 16896))  # 16 x 66 big tiles
    _table(data_dir, _rows(lambda o, s: 1.0, lambda o, s: 0.5) + wide)
    big = sm90.CONFIGS[BIG].with_raster("row", 1)
    assert sm90.predict_ms(big, 2048, 16896, 4096, 132) == pytest.approx(8 * 2.0)
    assert sm90.predict_ms(big, 1024, 33792, 4096, 132) == pytest.approx(8 * 2.0)  # 8 x 132 tiles: wider still
    assert sm90.predict_ms(big, 4224, 8192, 4096, 132) == pytest.approx(8 * 1.0)


def test_no_table_falls_back_to_the_documented_guess(data_dir, monkeypatch):
    shapes = [(4096, 4096, 4096), (128 * 132, 384, 4096), (3000, 14336, 4096)]
    assert sm90.predict_ms(sm90.CONFIGS[BIG], 4096, 4096, 4096) is None
    for M, N, K in shapes:
        assert sm90.default_config(M, N, K, 132) == _guess(M, N, K)
    _table(data_dir, _rows(lambda o, s: 1.0, lambda o, s: 0.3))  # a table that always picks small
    assert sm90.default_config(4096, 4096, 4096, 132).BN == 128
    monkeypatch.setenv(tile_table.ENV_VAR, "guess")
    for M, N, K in shapes:
        assert sm90.default_config(M, N, K, 132) == _guess(M, N, K)


def test_a_missing_named_table_is_an_error_not_a_silent_guess(data_dir, monkeypatch):
    monkeypatch.setenv(tile_table.ENV_VAR, str(data_dir / "nowhere.csv"))
    with pytest.raises(GemmError, match="nowhere.csv: no such file"):
        sm90.default_config(4096, 4096, 4096, 132)


@pytest.mark.parametrize("field,value,message", [
    ("config", "64x64x64", "unknown config '64x64x64'"),
    ("order", "diagonal", "order must be 'row' or 'col'"),
    ("swizzle", "0", "swizzle must be a positive int"),
    ("K", "4k", "K must be a positive int"),
    ("ms_per_wave", "-1", "ms_per_wave must be a positive number"),
    ("ms_per_wave", "nan", "ms_per_wave must be a positive number"),
    ("tile_name", "m128n256k64_s4", "config 128x256x64 was recorded as 'm128n256k64_s4'.*re-record"),
])
def test_a_bad_row_is_refused_naming_the_file_and_line(data_dir, field, value, message):
    rows = _rows(lambda o, s: 1.0, lambda o, s: 0.5)
    rows[2] = dict(rows[2], **{field: value})
    path = _table(data_dir, rows)
    with pytest.raises(GemmError, match=f"{path}, line 4: {message}"):
        sm90.default_config(4096, 4096, 4096, 132)


def test_rows_of_a_removed_config_are_skipped_and_other_unknown_names_refused(data_dir):
    """A table recorded before a config was removed (sm90.RETIRED_CONFIGS) still reads: its rows of
    that config say nothing about the others; a name that never was a config is still an error."""
    rows = _rows(lambda o, s: 1.0, lambda o, s: 0.5)
    gone = dict(rows[0], config=sm90.RETIRED_CONFIGS[0], tile_name="m128n224k64_s4_dc", ms_per_wave=0.01)
    path = _table(data_dir, rows + [gone])
    loaded = sm90.load_table(path)
    assert not loaded.has(sm90.RETIRED_CONFIGS[0]) and loaded.has(BIG) and loaded.has(SMALL)
    picked = sm90.default_config(4096, 4096, 4096, 132)  # the retired row's 0.01 ms weighs nothing
    assert (picked.BN, picked.direct_c) == (256, False)
    with pytest.raises(GemmError, match=f"{path}, line {len(rows) + 2}: unknown config"):
        tile_table.load(path, sm90.CONFIGS)  # the caller names no retired configs
    _table(data_dir, rows + [dict(gone, config="128x224x64e")])
    with pytest.raises(GemmError, match="unknown config '128x224x64e'"):
        sm90.default_config(4096, 4096, 4096, 132)


def test_the_shipped_table_reads_without_its_removed_configs():
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "data" / "h200" / tile_table.TABLE_NAME
    loaded = sm90.load_table(path)
    assert all(loaded.has(n) for n in sm90.CONFIGS)
    assert not any(loaded.has(n) for n in sm90.RETIRED_CONFIGS)


def test_a_table_without_a_column_or_with_a_repeated_row_is_refused(data_dir, monkeypatch):
    rows = _rows(lambda o, s: 1.0, lambda o, s: 0.5)
    path = _write(data_dir / "no_waves.csv", rows, [c for c in rows[0] if c != "waves"])
    monkeypatch.setenv(tile_table.ENV_VAR, str(path))
    with pytest.raises(GemmError, match=r"no_waves.csv: missing column\(s\) \['waves'\]"):
        sm90.default_config(4096, 4096, 4096, 132)
    path = _write(data_dir / "twice.csv", rows + rows[:1])
    monkeypatch.setenv(tile_table.ENV_VAR, str(path))
    with pytest.raises(GemmError, match=f"twice.csv, line {len(rows) + 2}: a second row"):
        sm90.default_config(4096, 4096, 4096, 132)


def test_the_table_path_still_checks_shapes_and_shared_memory(data_dir):
    _table(data_dir, _rows(lambda o, s: 1.0, lambda o, s: 0.5))
    with pytest.raises(GemmError, match="M must be a positive int"):
        sm90.default_config(0, 8, 8, 132)
    with pytest.raises(GemmError, match="no sm90 GEMM config fits"):
        sm90.default_config(8, 8, 8, 132, 1000)


@pytest.mark.parametrize("small_gain,want", [(0.03, 256), (0.08, 128)])
def test_a_smaller_tile_must_win_by_the_measured_margin(data_dir, small_gain, want):
    # 16896 x 384: 2 waves of big tiles against 3 of small ones, the small ones faster by small_gain.
    _table(data_dir, _rows(lambda o, s: 1.0, lambda o, s: 2 / 3 * (1 - small_gain)))
    assert tile_table.SMALLER_TILE_MARGIN == 0.05
    assert sm90.default_config(128 * 132, 384, 4096, 132).BN == want


def test_the_engines_pick_is_the_best_in_whole_waves(data_dir, monkeypatch):
    # auto_config (the plan, the profiles, the overlap measurements) picks among whole-wave configs;
    # a plain GEMM's default takes the stream-K tail. Same table as above: they differ here.
    from fo_lib import gemm
    monkeypatch.setattr(sm90, "is_supported", lambda *a: True)
    _table(data_dir, _rows(lambda o, s: 1.0, lambda o, s: 0.6))
    plain = sm90.default_config(1536, 3584, 8192, 132)
    engine = gemm.auto_config(1536, 3584, 8192, 132)
    assert (plain.BN, plain.stream_k) == (256, True)
    assert (engine.BN, engine.stream_k) == (128, False)
    assert gemm.auto_config(1536, 3584, 8192, 132, stream_k=True) == plain


def test_a_tile_between_the_two_gets_the_margin_in_proportion_to_its_area():
    m = tile_table.SMALLER_TILE_MARGIN
    assert tile_table.smaller_tile_margin(1.0) == 0.0
    assert tile_table.smaller_tile_margin(0.5) == pytest.approx(m)
    assert tile_table.smaller_tile_margin(176 / 256) == pytest.approx(m * 2 * 80 / 256)
    assert tile_table.smaller_tile_margin(0.25) == pytest.approx(m)  # never more than at half the area
