"""CPU checks of fo_lib.gemm.config_tuning: the shortlist the model proposes, the winner rule, and the
on-disk cache (keys, round trip, files another process wrote, unreadable files, stale entries).
The timing itself runs on the GPU (tests/gpu/test_gemm_sm90_autotune_gpu.py)."""
import json
from dataclasses import replace

import pytest

from fo_lib.gemm import config_tuning
from fo_lib.gemm import sm90, tile_table
from fo_lib.gemm.sm90 import config_tuning as sm90_tuning
from fo_lib.gemm.sm90 import launch as sm90_launch

C = sm90.CONFIGS


def _ranked(*cfgs):
    return [(1.0 + 0.01 * i, c) for i, c in enumerate(cfgs)]


def test_the_shortlist_is_the_best_of_each_tile_and_tail_then_the_models_pick():
    a = C["128x256x64"].with_raster("row", 8)
    ranked = _ranked(a, a.with_raster("row", 4), C["128x192x64c2"].with_raster("row", 8),
                     replace(C["128x176x64"], stream_k=True), C["128x176x64"], C["128x160x64"], C["128x128x64"])
    model = a.with_raster("row", 4)  # not the best of its tile: timed as well
    got = config_tuning.shortlist(ranked, model)
    assert got == [a, C["128x192x64c2"].with_raster("row", 8), replace(C["128x176x64"], stream_k=True),
                   C["128x176x64"], model]
    assert config_tuning.shortlist(ranked, a) == got[:4]
    guess = C["128x128x64"].with_raster("row", 8)
    assert config_tuning.shortlist(ranked, a, also=(guess, a)) == got[:4] + [guess]


def test_the_shortlist_keeps_a_128_or_256_wide_tile():
    mids = [C[f"128x{bn}x64"] for bn in (176, 192, 208, 224, 240)]
    got = config_tuning.shortlist(_ranked(*mids, C["128x128x64c2"], C["128x256x64"]), mids[0])
    assert got == mids[:4] + [C["128x128x64c2"]]


def test_the_models_pick_stays_unless_beaten_by_more_than_noise():
    w = config_tuning.WIN
    assert config_tuning.choose({"m": 1.0, "x": 1.0 - w / 2, "y": 1.01}, "m") == "m"
    assert config_tuning.choose({"m": 1.0, "x": 1.0 - 2 * w, "y": 1.0 - 3 * w}, "m") == "y"


def test_a_handicap_scales_a_candidates_time_before_the_comparison():
    w, h = config_tuning.WIN, {"x": 1.05}
    timed = {"m": 1.0, "x": 0.97, "y": 0.99}
    assert config_tuning.choose(timed, "m") == "x"
    assert config_tuning.choose(timed, "m", h) == "y"  # x counts 1.0185
    assert config_tuning.choose({"m": 1.0, "x": 0.9}, "m", h) == "x"  # 0.945: still faster by more than WIN
    assert config_tuning.choose({"m": 1.0, "x": 0.96}, "m", {"m": 1.05}) == "x"  # the model's pick handicapped
    assert config_tuning.choose({"m": 1.0, "x": 1.0 - w / 2}, "m", {"m": 1.0 + w}) == "x"


def test_on_one_wave_single_cta_candidates_are_handicapped_and_clusters_not():
    model = C["128x128x64"].with_raster("row", 1)
    cands = [model, C["128x128x64"].with_raster("col", 8), C["128x128x64c2"].with_raster("row", 8)]
    h = sm90.tuning_handicap(cands, model, 1100, 1792, 132)  # 9 x 14 = 126 tiles: one wave
    assert h == {sm90.config_label(c): 1 + config_tuning.ONE_WAVE_SINGLE_CTA for c in cands[:2]}
    assert config_tuning.ONE_WAVE_SINGLE_CTA > config_tuning.WIN
    assert sm90.tuning_handicap(cands, model, 1100, 2048, 132) == {}  # 9 x 16 = 144 tiles
    # A cluster 0.5 % behind a single CTA on one wave: the cluster; 5 % behind: the single CTA.
    ms = {sm90.config_label(cands[1]): 1.0, sm90.config_label(cands[2]): 1.005, sm90.config_label(model): 1.1}
    assert config_tuning.choose(ms, sm90.config_label(model), h) == sm90.config_label(cands[2])
    ms[sm90.config_label(cands[2])] = 1.05
    assert config_tuning.choose(ms, sm90.config_label(model), h) == sm90.config_label(cands[1])


def test_a_tuned_config_is_read_back_by_another_process(tuning_cache):
    k = config_tuning.key("NVIDIA H200", 132, 2048, 7168, 5120, "bf16", "configs")
    assert config_tuning.lookup(k, sm90.Sm90Config) is None
    cfg = C["128x176x64c2"].with_raster("row", 8)
    config_tuning.remember(k, cfg, {"a": 0.2, "b": 0.21}, "b")
    assert config_tuning.lookup(k, sm90.Sm90Config) == cfg
    config_tuning.forget()  # as a new process: from the file
    assert config_tuning.lookup(k, sm90.Sm90Config) == cfg
    entry = json.loads(tuning_cache.read_text())[k]
    assert entry["model"] == "b" and entry["ms"] == {"a": 0.2, "b": 0.21}
    # Another process's entry, written meanwhile, is kept when this one writes.
    other = config_tuning.key("NVIDIA H200", 132, 1100, 1792, 5120, "bf16", "configs")
    data = json.loads(tuning_cache.read_text())
    data[other] = dict(config=dict(BN=128, stages=5, order="row", swizzle=2, stream_k=False, cluster=2))
    tuning_cache.write_text(json.dumps(data))
    k3 = config_tuning.key("NVIDIA H200", 132, 4096, 4096, 4096, "bf16", "configs")
    config_tuning.remember(k3, C["128x256x64"], {"a": 1.0}, "a")
    assert set(json.loads(tuning_cache.read_text())) == {k, other, k3}


def test_keys_differ_by_shape_gpu_ctas_dtype_and_kernel():
    base = ("NVIDIA H200", 132, 2048, 7168, 5120, "bf16", "configs")
    keys = {config_tuning.key(*base)}
    for i, v in enumerate(("NVIDIA H100", 131, 2049, 7169, 5121, "f16", "other configs")):
        keys.add(config_tuning.key(*base[:i], v, *base[i + 1:]))
    assert len(keys) == 8


def test_unreadable_files_and_stale_entries_are_tuned_over(tuning_cache):
    k = config_tuning.key("NVIDIA H200", 132, 2048, 7168, 5120, "bf16", "configs")
    tuning_cache.write_text("{not json")
    with pytest.warns(RuntimeWarning, match="rewritten at the next tuning"):
        assert config_tuning.lookup(k, sm90.Sm90Config) is None
    config_tuning.remember(k, C["128x256x64"], {"a": 1.0}, "a")  # replaces the broken file
    assert json.loads(tuning_cache.read_text())[k]["config"]["BN"] == 256
    config_tuning.forget()
    tuning_cache.write_text(json.dumps({k: dict(config=dict(BN=204, stages=4, order="row", swizzle=8, stream_k=False,
                                                      cluster=1))}))
    assert config_tuning.lookup(k, sm90.Sm90Config) is None  # a tile width no longer valid
    tuning_cache.write_text(json.dumps({k: dict(config=dict(BN=256, unknown_field=1))}))
    config_tuning.forget()
    assert config_tuning.lookup(k, sm90.Sm90Config) is None


@pytest.mark.parametrize("value,on", [(None, True), ("1", True), ("0", False), ("off", False), ("False", False)])
def test_the_switch(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv(config_tuning.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(config_tuning.ENV_VAR, value)
    assert config_tuning.enabled() is on


def test_the_models_pick_where_autotuning_is_off(monkeypatch, tmp_path):
    """_tuned returns the model's pick before touching the operands (None here) when the switch is
    off, with a table or without."""
    model = C["128x256x64"]
    monkeypatch.setenv(config_tuning.ENV_VAR, "0")
    assert sm90_launch._tuned(None, None, "bf16", 1, 1, 1, 132, model) is model
    monkeypatch.setenv("FO_SM90_TILES", "guess")
    assert sm90_launch._tuned(None, None, "bf16", 1, 1, 1, 132, model) is model


@pytest.mark.parametrize("shape", [(2048, 7168, 5120), (1536, 3584, 18944), (7000, 2048, 8192), (256, 4096, 4096),
                                   (8192, 1280, 8192), (100, 100, 64)])
def test_the_table_free_shortlist(shape):
    """Without a table: the guess first, then one tile of each kind, every one valid, in whole waves
    and with a stream-K tail only where the grid has a partial last wave, one band on one wave."""
    from fo_lib.gemm.stream_k import stream_k_tiles
    M, N, K = shape
    model = sm90.guess_config(M, N, K, 132)
    got = sm90_tuning.table_free_candidates(M, N, K, 132, model)
    assert got[0] == model and len(set(got)) == len(got)
    assert {c.tile_name for c in got} >= {C[n].tile_name for n in sm90_tuning.TABLE_FREE_TILES}
    for c in got:
        c.validate()
        tiles = c.grid(M, N, 132).num_tiles
        assert not c.stream_k or (tiles > 132 and stream_k_tiles(tiles, 132))
        assert c.swizzle == 1 if tiles <= 132 else c.order == "row"


def test_without_a_table_the_first_call_times_the_table_free_shortlist(tuning_cache, monkeypatch):
    """No tile table: the first call times the table-free shortlist (GPU calls faked), takes the
    fastest, remembers it apart from tunings with a table, and the next call times nothing."""
    import contextlib
    from types import SimpleNamespace

    import torch
    monkeypatch.setenv("FO_SM90_TILES", "guess")
    monkeypatch.setenv(config_tuning.ENV_VAR, "1")
    monkeypatch.setattr(sm90_launch, "sm_count", lambda dev=None: 132)
    monkeypatch.setattr(sm90_launch, "kernel_digest", lambda dtype: "digest")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "device", lambda dev: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: None)
    timed = []

    def fake_time(shortlist, dtype, a, b, ctas, model):
        timed.append(list(shortlist))
        return {sm90.config_label(c): 0.9 if c.BN == 168 else 1.0 for c in shortlist}

    monkeypatch.setattr(sm90_launch, "time_candidates", fake_time)
    a = SimpleNamespace(device=SimpleNamespace(index=0))
    M, N, K = 1536, 3584, 18944
    model = sm90.guess_config(M, N, K, 132)
    got = sm90_launch._tuned(a, a, "bf16", M, N, K, 132, model)
    assert got.BN == 168 and timed == [sm90_tuning.table_free_candidates(M, N, K, 132, model)]
    config_tuning.forget()  # read back from the file, as another process would
    assert sm90_launch._tuned(a, a, "bf16", M, N, K, 132, model) == got and len(timed) == 1
    assert any("-table-free" in k for k in json.loads(tuning_cache.read_text()))


def test_a_tuning_is_keyed_by_the_shortlist_it_weighed(tmp_path):
    """Another table, the same table re-recorded, or no table: three keys (each tunes again)."""
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("config\n1\n")
    b.write_text("config\n2\n")
    keys = {sm90_tuning.shortlist_digest(p) for p in (a, b, None)}
    assert len(keys) == 3 and sm90_tuning.shortlist_digest(a) == sm90_tuning.shortlist_digest(a)
    a.write_text("config\n33\n")  # re-recorded in place (another size: whatever the clock's grain)
    assert sm90_tuning.shortlist_digest(a) not in keys


def test_a_cache_file_that_cannot_be_written_is_remembered_in_this_process(tuning_cache, monkeypatch):
    def refuse(src, dst):
        raise PermissionError(f"read-only: {dst}")

    monkeypatch.setattr(config_tuning.os, "replace", refuse)
    k = config_tuning.key("NVIDIA H200", 132, 2048, 7168, 5120, "bf16", "configs")
    config_tuning.remember(k, C["128x256x64"], {"a": 1.0}, "a")
    assert config_tuning.lookup(k, sm90.Sm90Config) == C["128x256x64"]
    assert list(tuning_cache.parent.iterdir()) == []  # no file, no leftover temporary


def test_no_cache_folder_at_all_means_nothing_remembered(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("FO_CACHE_DIR", str(blocker / "sub"))  # cannot be made
    config_tuning.forget()
    try:
        k = config_tuning.key("NVIDIA H200", 132, 1, 2, 3, "bf16", "configs")
        assert config_tuning.lookup(k, sm90.Sm90Config) is None
        config_tuning.remember(k, C["128x256x64"], {"a": 1.0}, "a")
        assert config_tuning.lookup(k, sm90.Sm90Config) == C["128x256x64"]
    finally:
        config_tuning.forget()


def test_a_failed_tuning_is_remembered_until_forget(tuning_cache):
    k = config_tuning.key("NVIDIA H200", 132, 7, 8, 9, "bf16", "configs")
    assert not config_tuning.failed(k)
    config_tuning.mark_failed(k)
    assert config_tuning.failed(k)
    config_tuning.forget()
    assert not config_tuning.failed(k)


def test_the_digest_follows_every_part_and_its_order():
    assert config_tuning.digest(["a 1", "b 2"]) == config_tuning.digest(iter(["a 1", "b 2"]))
    assert len({config_tuning.digest(p) for p in (["a 1", "b 2"], ["b 2", "a 1"], ["a 1", "b 3"], ["a 1b 2"])}) == 4


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    from fo_lib._util import atomic_write
    target = tmp_path / "f.bin"
    atomic_write(target, b"one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"

    def refuse(src, dst):
        raise PermissionError("read-only")

    monkeypatch.setattr("os.replace", refuse)
    with pytest.raises(PermissionError):
        atomic_write(target, b"three")
    assert target.read_bytes() == b"two" and sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]


def test_rotation_sets_reach_three_l2s_between_two_and_sixteen_sets():
    l2 = 60 * 2**20
    assert config_tuning.rotation_sets(10 * l2, l2) == 2  # a big shape: its own copy breaks the reuse
    assert config_tuning.rotation_sets(l2, l2) == 3
    assert config_tuning.rotation_sets(l2 // 2 + 1, l2) == 6
    assert config_tuning.rotation_sets(1, l2) == 16


def test_a_one_wave_grid_times_each_shortlisted_tile_in_several_rasters(monkeypatch):
    from pathlib import Path
    table = Path(__file__).resolve().parents[1] / "data" / "h200" / "gemm_sm90_tiles.csv"
    monkeypatch.setenv("FO_SM90_TILES", str(table))
    path = tile_table.table_path()

    def candidates(M, N, K):
        model = sm90.default_config(M, N, K, 132)
        return model, sm90.tuning_candidates(path, M, N, K, 132, model)

    model, one_wave = candidates(1100, 1792, 5120)  # 9 x 14 tiles of 128 x 128
    assert model.grid(1100, 1792, 132).num_tiles <= 132
    tiles = {c.tile_name for c in one_wave}
    for t in tiles:
        rasters = {(c.order, c.swizzle) for c in one_wave if c.tile_name == t}
        assert set(sm90_tuning.ONE_WAVE_RASTERS) <= rasters, (t, rasters)
    assert len(one_wave) == len(set(one_wave))
    # a swizzle wider than the grid's band is left out: 3 tile rows take no band of 8
    _, short = candidates(300, 1792, 5120)
    assert ("row", 8) not in {(c.order, c.swizzle) for c in short} and ("col", 8) in {(c.order, c.swizzle) for c in short}
    # many waves: one raster per (tile, stream-K) pair, as the table ranks them
    _, many = candidates(8192, 8192, 4096)
    assert len({(c.tile_name, c.stream_k) for c in many}) == len(many)


def test_another_cache_file_by_name(tuning_cache, monkeypatch, tmp_path):
    other = tmp_path / "elsewhere" / "tunings.json"
    monkeypatch.setenv(config_tuning.FILE_ENV, str(other))
    assert config_tuning.cache_path() == other
    monkeypatch.delenv(config_tuning.FILE_ENV)
    assert config_tuning.cache_path() == tuning_cache


def test_the_digest_follows_how_tuning_times_and_the_one_wave_rasters(nvrtc, monkeypatch):
    sm90_tuning._kernel_digest.cache_clear()
    try:
        base = sm90.kernel_digest("bf16")
        monkeypatch.setattr(config_tuning, "TIMING", config_tuning.TIMING + " (another way)")
        sm90_tuning._kernel_digest.cache_clear()
        timed_otherwise = sm90.kernel_digest("bf16")
        monkeypatch.undo()
        monkeypatch.setattr(sm90_tuning, "ONE_WAVE_RASTERS", sm90_tuning.ONE_WAVE_RASTERS[:1])
        sm90_tuning._kernel_digest.cache_clear()
        fewer_rasters = sm90.kernel_digest("bf16")
        monkeypatch.undo()
        monkeypatch.setattr(config_tuning, "ONE_WAVE_SINGLE_CTA", 0.0)
        sm90_tuning._kernel_digest.cache_clear()
        no_handicap = sm90.kernel_digest("bf16")
        assert len({base, timed_otherwise, fewer_rasters, no_handicap}) == 4
    finally:
        sm90_tuning._kernel_digest.cache_clear()


def test_tuning_idles_before_timing_a_one_wave_grid_only(monkeypatch):
    """time_launches hands bench_interleaved the idle it is given (graphs, shuffled rounds); autotuning
    gives SETTLE_S on a grid of one wave of the model's tiles and none on more, as its tag says."""
    from fo_lib import testing
    seen = []

    def fake_bench(runs, **kw):
        seen.append(kw)
        return {label: [1.0, 2.0, 3.0] for label in runs}

    monkeypatch.setattr(testing, "bench_interleaved", fake_bench)
    assert config_tuning.time_launches({"a": None, "b": None}, settle_s=0.5) == {"a": 2.0, "b": 2.0}
    assert seen[-1]["settle_s"] == 0.5 and seen[-1]["graph"] and seen[-1]["order"] == "shuffle"
    config_tuning.time_launches({"a": None})
    assert seen[-1]["settle_s"] == 0.0
    cfg = sm90.CONFIGS["128x128x64"]
    assert sm90.tuning_settle_s(cfg, 1100, 1792, 132) == config_tuning.SETTLE_S > 0  # 9 x 14 = 126 tiles
    assert sm90.tuning_settle_s(cfg, 1100, 2048, 132) == 0.0  # 9 x 16 = 144 tiles
    assert sm90.tuning_settle_s(sm90.CONFIGS["128x256x64"], 1100, 2048, 132) > 0  # 72 tiles
    assert f"after {config_tuning.SETTLE_S} s idle on one wave" in config_tuning.TIMING
    # time_candidates (autotuning, the agreement experiment, the probe) idles by the model's grid.
    monkeypatch.setattr(sm90_launch, "tuning_runs", lambda configs, *a: {sm90.config_label(c): None for c in configs})

    class Operand:
        def __init__(self, rows):
            self.shape = (rows, 5120)
    for n, settle in ((1792, config_tuning.SETTLE_S), (2048, 0.0)):
        ms = sm90.time_candidates([cfg], "bf16", Operand(1100), Operand(n), 132, cfg)
        assert ms == {sm90.config_label(cfg): 2.0} and seen[-1]["settle_s"] == settle
