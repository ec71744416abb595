"""The Hopper GEMM's config choice from a measured tile table (fo_lib.gemm.tile_table), on the CPU with
synthetic tables in a temporary data folder: the choice follows the table, tails cost whole tiles,
no table falls back to the documented guess, and a bad table is refused naming its file and line."""
import csv
from dataclasses import replace

import pytest

from fo_lib import provenance
from fo_lib.gemm import GemmError, pick_by_waves, sm90, tile_table
from fo_lib.gemm.sm90 import pick as sm90_pick

BIG, SMALL = "128x256x64", "128x128x64"
# The recording grid of scripts/bench/record_sm90_tiles.py on 132 SMs (33 x 32 tiles of 128 x 256 =
# 8 waves; 16 waves of 128 x 128).
GRID = (4224, 8192)


def _rows(ms_big, ms_small, rasters=(("row", 1), ("row", 8)), ks=(1024, 4096), grid=GRID, extra=None):
    """Rows with a wave of the big tile taking ``ms_big(order, swizzle) * K / 4096`` ms (likewise small)."""
    rows = []
    for name, ms in ((BIG, ms_big), (SMALL, ms_small)):
        for order, sw in rasters:
            for k in ks:
                rows.append(dict(config=name, tile_name=sm90.CONFIGS[name].tile_name, order=order, swizzle=sw,
                                 M=grid[0], N=grid[1], K=k, waves=8 if name == BIG else 16,
                                 ms_per_wave=ms(order, sw) * k / 4096, tflops=1.0))
    return rows + list(extra or ())


def _write(path, rows, columns=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns or list(rows[0]), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """An empty data folder seen as that of an 'h200'."""
    monkeypatch.setattr(provenance, "DATA_DIR", tmp_path)
    monkeypatch.setattr(tile_table, "current_gpu_tag", lambda: "h200")
    monkeypatch.delenv(tile_table.ENV_VAR, raising=False)
    return tmp_path


def _table(data_dir, rows):
    return _write(data_dir / "h200" / tile_table.TABLE_NAME, rows)


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
    with pytest.raises(GemmError, match="no rows for 128x256x64d"):  # a config the table lacks
        sm90.predict_ms(sm90.CONFIGS["128x256x64d"], 8192, 8192, 4096, 132)


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


def _script(name):
    from script_loader import load_script
    return load_script(f"scripts/bench/{name}.py")


@pytest.mark.parametrize("sms", [132, 114, 78])
def test_the_recording_grids_are_whole_waves_of_every_candidate(sms):
    rec = _script("record_sm90_tiles")
    grids = rec.grids(sms)
    measured = [name for *_, names in grids for name in names]
    # Every candidate once per aspect, on whole waves of its own tiles.
    assert sorted(measured) == sorted(list(rec.candidates(sms)) * 3)
    for M, N, names in grids:
        for name in names:
            cfg = sm90.CONFIGS[name]
            assert M % cfg.BM == 0 and N % cfg.BN == 0 and (M // cfg.BM) * (N // cfg.BN) % sms == 0
    bases = [(M, N) for M, N, names in grids if "128x256x64" in names]
    area = bases[0][0] * bases[0][1]
    for M, N, names in grids:  # 128 x 128 shares the big tile's grid; the others about its area
        assert "128x128x64" in names or "128x256x64" not in names
        assert all(abs(m * n / area - 1) < 0.07 for m, n in bases)
        assert abs(M * N / area - 1) < 0.07, (M, N, names)
    if sms == 132:
        assert bases == [(1024, 33792), (4096, 8448), (16896, 2048)]  # 8 x 132, 32 x 33, 132 x 8 big tiles
        assert (4608, 7744, ("128x176x64", "128x176x64c2", "128x176x64p", "128x176x64c2p", "128x176x64pd")) in grids  # 36 x 44 tiles: 12 waves


def test_the_recorder_writes_a_table_the_picker_reads(data_dir):
    rec = _script("record_sm90_tiles")
    rows = []
    for M, N, names in rec.grids(132):
        for K in rec.KS:
            # Synthetic GEMM times: per tile area, every width but 256 4 % slower (a wave of the
            # small tile, twice as many waves, takes 0.52 of a wave of the big one); col order 2 %
            # slower; clusters 3 % slower (never taken here).
            med = {}
            for n in names:
                c = sm90.CONFIGS[n]
                waves = (M // c.BM) * (N // c.BN) // 132
                for o, s in rec.rasters(c):
                    med[rec.variant(n, o, s)] = (waves * c.BN / 256 * (1.0 if c.BN == 256 else 1.04)
                                                 * (1.02 if o == "col" else 1.0) * (1.03 if c.cluster > 1 else 1.0)
                                                 * K / 4096 / 8)
            med["torch"] = 1.0
            rows += rec.table_rows(M, N, K, 132, med, 12, 3, names)
    per_grid = sum(len(rec.rasters(c)) for c in rec.candidates().values())
    # 128 and 256 wide (cooperative) and 128 wide ping-pong, alone and in clusters: every raster; the
    # mid widths, 176 / 192 ping-pong and the direct-C widths: three rasters alone, two in clusters;
    # the odd widths (cooperative and ping-pong, no clusters) and the ping-pong direct-C tiles: three rasters.
    mids = len(sm90.MID_WIDTHS) + 2 + sum(c.direct_c and c.cluster == 1 and not c.pingpong
                                          for c in sm90.CONFIGS.values())
    odd = 2 * len(sm90.ODD_WIDTHS) + len(sm90.PINGPONG_DIRECT_WIDTHS)
    assert per_grid == 3 * len(rec.RASTERS) + 3 * len(rec.CLUSTER_RASTERS) + mids * (
        len(rec.MID_RASTERS) + len(rec.MID_CLUSTER_RASTERS)) + odd * len(rec.MID_RASTERS)
    assert len(rows) == 3 * len(rec.KS) * per_grid
    _table(data_dir, rows)
    cfg = sm90.default_config(4096, 4096, 4096, 132)
    assert (cfg.BN, cfg.order, cfg.swizzle) == (256, "row", 8)  # 4 waves x 1 against 8 x 0.52; all rasters tie
    assert sm90.predict_ms(cfg, 4096, 4096, 4096, 132) == pytest.approx(4 / 8)
    # 2 waves of 128 x 192 (0.78 each) tie 3 of 128 x 128 (0.52) and beat 2 of 128 x 256: the bigger of the tied.
    assert sm90.default_config(128 * 132, 384, 4096, 132).BN == 192


def test_the_llm_shapes_meet_the_issue():
    from fo_lib.experiments.gemm_llm import SHAPES as shapes
    assert len(shapes) >= 24 and len({s[1:] for s in shapes}) == len(shapes)
    assert min(m for _, m, _, _ in shapes) >= 1024 and max(m for _, m, _, _ in shapes) == 16384
    assert sum(m % 128 != 0 for _, m, _, _ in shapes) >= 4
    assert all(k % 8 == 0 for *_, k in shapes)
    assert {o.split()[0] for o, *_ in shapes} >= {"llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen2.5-7b"}
    assert {o.split()[-1] for o, *_ in shapes} == {"tp1", "tp2", "tp4", "tp8"}


def test_record_then_benchmark_end_to_end_with_fake_timings(data_dir, monkeypatch, tmp_path, capsys):
    """The two GPU scripts' own logic (rows, table, provenance, summary) with the timing faked: the
    table one writes is the table the other picks from."""
    import json

    import pandas as pd

    from fo_lib.experiments import gemm_llm

    rec, llm = _script("record_sm90_tiles"), _script("bench_gemm_sm90_llm")
    monkeypatch.setattr(sm90, "is_supported", lambda *a: True)
    monkeypatch.setattr(sm90, "sm_count", lambda *a: 132)

    measured_groups = []

    def fake_measure(group, K, dtype, rounds, inner, sm_count, seed):
        measured_groups.append([(M, N) for M, N, _ in group])
        out = {}
        for M, N, names in group:
            med = {rec.variant(n, o, s): (M // c.BM) * (N // c.BN) / 132 * c.BN / 256
                   * (1.0 if c.BN in (128, 256) else 1.06) * (1.0 if c.BN == 256 else 1.02) * (1 + 0.01 * s)
                   * (1.05 if c.cluster > 1 else 1) * K / 4096
                   for n in names for c in [sm90.CONFIGS[n]] for o, s in rec.rasters(c)}
            out[(M, N)] = dict(med, torch=1.0)
        return out

    monkeypatch.setattr(rec, "measure", fake_measure)
    table = tmp_path / "out" / "gemm_sm90_tiles.csv"
    rec.main(["--out", str(table), "--K", "1024", "4096"])
    assert len(pd.read_csv(table)) == 3 * 2 * sum(len(rec.rasters(c)) for c in rec.candidates().values())
    assert json.loads(table.with_suffix(".meta.json").read_text())["waves"] == rec.WAVES
    # One timing session per aspect and K, holding every grid of that aspect.
    assert len(measured_groups) == len(rec.ASPECTS) * 2
    assert sorted(g for group in measured_groups[::2] for g in group) == sorted((M, N) for M, N, _ in rec.grids(132))

    def fake_bench(M, N, K, dtype, rounds, inner, sms, seed, cluster=False, control=False):
        cfg = sm90.default_config(M, N, K, sms)
        alt, guess = gemm_llm.alt_config(cfg, M, N, K, sms), sm90.guess_config(M, N, K, sms)
        t = sm90.predict_ms(cfg, M, N, K, sms)
        again = dict(ours_again=t * 1.01, torch_again=t) if control else {}
        return cfg, cfg, alt, guess, 1e-3, dict(ours=t, torch=t, signal=t * 1.004, alt=t * 1.1, guess=t * 1.05,
                                                no_sk=t * 1.2, model=t, **again)

    monkeypatch.setenv(tile_table.ENV_VAR, "guess")  # restored after the test; main overrides it
    monkeypatch.setattr(gemm_llm, "bench_shape", fake_bench)
    out = tmp_path / "llm.csv"
    llm.main(["--out", str(out), "--tiles", str(table), "--no-cluster"])
    df = pd.read_csv(out)
    assert len(df) == len(gemm_llm.SHAPES)
    assert set(df.columns) >= {"M", "N", "K", "ours_ms", "cublas_ms", "signal_ms", "config"}
    assert (df.config.str.startswith("128x128x64") | df.config.str.startswith("128x256x64")).all()
    assert json.loads(out.with_suffix(".meta.json").read_text())["tiles_table"] == str(table)
    printed = capsys.readouterr().out
    assert "geomean 1.000, median 1.000, worst 1.000" in printed and "signal vs plain median +0.40%" in printed
    # the control variants by default: ours timed again 1 % slower, inside the 2 % it names shapes beyond
    assert "control, the same calls again in graphs of their own: ours 1.010 .. 1.010" in printed
    assert "apart by more than 2%: none" in printed and (df.ours_again_ms > df.ours_ms).all()
    sk = df.stream_k_tiles > 0
    assert sk.any() and df.config[sk].str.endswith("+sk").all() and "whole waves / stream-K geomean 1.200" in printed


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


def test_a_tile_between_the_two_gets_the_margin_in_proportion_to_its_area():
    m = tile_table.SMALLER_TILE_MARGIN
    assert tile_table.smaller_tile_margin(1.0) == 0.0
    assert tile_table.smaller_tile_margin(0.5) == pytest.approx(m)
    assert tile_table.smaller_tile_margin(176 / 256) == pytest.approx(m * 2 * 80 / 256)
    assert tile_table.smaller_tile_margin(0.25) == pytest.approx(m)  # never more than at half the area


def test_measure_times_each_grid_on_its_own_operands_in_one_session(monkeypatch):
    """The recorder's ``measure`` (GPU calls stubbed): one interleaved session for a whole group, each
    variant running its own config and raster on its own grid's operands, torch once per grid."""
    import torch

    from fo_lib import testing
    from fo_lib.experiments import kernel_bench

    rec = _script("record_sm90_tiles")
    group = rec.aspect_grids(132, rec.WAVES, 1.0)
    sets_of = {}

    def fake_sets(M, N, K, dtype):
        sets_of[(M, N)] = [(torch.randn(4, 8), torch.randn(6, 8), torch.empty(4, 6)) for _ in range(2)]
        return sets_of[(M, N)]

    calls = []

    def fake_gemm(a, b, out=None, config=None, ctas=None):
        calls.append((id(a), config, ctas))
        return torch.matmul(a, b.T)

    sessions = []

    def fake_bench(fns, **kw):
        sessions.append((list(fns), kw))
        out = {}
        for key, fn in fns.items():
            del calls[:]
            fn(0)
            out[key] = [float(len(out))]
            if key[2] == "torch":
                assert not calls
            else:
                name, raster = key[2].split("/")
                (a_id, cfg, ctas), = calls
                assert a_id == id(sets_of[key[:2]][0][0]) and ctas == 132
                assert cfg == sm90.CONFIGS[name].with_raster(raster[:3], int(raster[3:]))
        return out

    monkeypatch.setattr(kernel_bench, "input_sets", fake_sets)
    monkeypatch.setattr(sm90, "gemm_nt", fake_gemm)
    monkeypatch.setattr(testing, "bench_interleaved", fake_bench)
    med = rec.measure(group, 4096, torch.bfloat16, 3, 1, 132, 0)
    assert len(sessions) == 1 and sessions[0][1]["order"] == "shuffle" and sessions[0][1]["graph"]
    assert set(med) == {(M, N) for M, N, _ in group}
    for M, N, names in group:
        want = {"torch"} | {rec.variant(n, o, s) for n in names for o, s in rec.rasters(sm90.CONFIGS[n])}
        assert set(med[(M, N)]) == want
    # Another aspect draws other orders.
    other = rec.aspect_grids(132, rec.WAVES, 16.0)
    rec.measure(other, 4096, torch.bfloat16, 3, 1, 132, 0)
    assert sessions[0][1]["seed"] != sessions[1][1]["seed"]
