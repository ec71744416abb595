"""The offline phase's one home on the CPU: where a GPU's tables are looked up (the user's
calibration, then the repository's record, then the model with one warning), and ``calibrate``'s
parts (faked) resuming after a kill, never counting a quick run as a full one, and recording into
the right folder."""
import json
import warnings

import pytest

from fo_lib import provenance
from fo_lib import store
from fo_lib.calibration import offline
from fo_lib.gemm import tile_table


@pytest.fixture
def places(tmp_path, monkeypatch):
    """An empty user cache and an empty repository data folder."""
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(provenance, "DATA_DIR", tmp_path / "data")
    store.forget_warnings()
    yield tmp_path
    store.forget_warnings()


def _put(folder, name, text="x"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


def test_lookup_order_calibration_then_record_then_one_warning(places):
    with pytest.warns(RuntimeWarning, match="python -m fo_lib calibrate"):
        assert store.find(store.TILES, "h100") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per (record, GPU) and process
        assert store.find(store.TILES, "h100") is None
        assert store.find(store.TILES, None) is None  # no GPU: nothing to calibrate, nothing said
    record = _put(places / "data" / "h100", store.TILES)
    assert store.find(store.TILES, "h100") == store.Found(record, "record")
    mine = _put(places / "cache" / "calibration" / "h100", store.TILES)
    assert store.find(store.TILES, "h100") == store.Found(mine, "calibration")
    assert store.find(store.TILES, "h200", warn=False) is None  # another GPU's files are not this one's


def test_the_cache_folder_follows_xdg_without_fo_cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("FO_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert store.calibration_dir("h100") == tmp_path / "fo_lib" / "calibration" / "h100"
    for bad in ("", "../h100", ".hidden", None):
        with pytest.raises(ValueError):
            store.calibration_dir(bad)


def test_the_tile_picker_reads_the_calibration_first(places, monkeypatch):
    monkeypatch.delenv(tile_table.ENV_VAR, raising=False)
    monkeypatch.setattr(tile_table, "current_gpu_tag", lambda: "h100")
    with pytest.warns(RuntimeWarning, match="Hopper GEMM tile table"):
        assert tile_table.table_path() is None
    record = _put(places / "data" / "h100", store.TILES)
    assert tile_table.table_path() == str(record)
    mine = _put(places / "cache" / "calibration" / "h100", store.TILES)
    assert tile_table.table_path() == str(mine)
    monkeypatch.setenv(tile_table.ENV_VAR, "guess")  # an explicit choice still wins
    assert tile_table.table_path() is None


def test_model_params_from_the_fit_sidecar(places):
    fitted = {"all_reduce": {"launch_ms": 0.02, "comm_slowdown": 1.1, "gemm_slowdown": 1.0, "contention": "uniform"}}
    folder = places / "data" / "h100"
    _put(folder, store.MODEL, "primitive\nall_reduce\n")
    _put(folder, "overlap_calibration.meta.json", json.dumps({"fitted_on_all_shapes": fitted}))
    assert store.model_params("h100") == fitted
    _put(folder, "overlap_calibration.meta.json", "{}")
    with pytest.raises(ValueError, match="fitted_on_all_shapes"):
        store.model_params("h100")


def test_the_shipped_h200_fit_is_found():
    store.forget_warnings()
    params = store.model_params("h200")
    assert set(params) == {"all_reduce", "reduce_scatter", "all_to_all"}
    assert all(p["comm_slowdown"] >= 1.0 for p in params.values())


@pytest.fixture
def fake_parts(places, monkeypatch):
    """Parts that write their files and log their runs; ``fail`` names a part that dies mid-way."""
    ran, fail = [], set()

    def runner(part):
        def run(ctx, bar):
            ran.append((part, ctx.quick))
            for name in offline._files(part):
                _put(ctx.out, name, part)
                if part in fail:
                    raise KeyboardInterrupt  # killed after its first file
        return run

    monkeypatch.setattr(offline, "RUNS", {p: runner(p) for p in offline.PARTS})
    monkeypatch.setattr(offline, "why_not", lambda part, ctx: "needs two GPUs" if part == "nccl" else None)
    return ran, fail


def test_a_killed_calibration_resumes_at_the_unfinished_part(fake_parts, places):
    ran, fail = fake_parts
    fail.add("model")
    with pytest.raises(KeyboardInterrupt):
        offline.calibrate(gpu="h100", echo=lambda s: None)
    assert ran == [("tiles", False), ("overlap", False), ("model", False)]
    fail.clear()
    ran.clear()
    assert not (store.calibration_dir("h100") / store.MODEL).exists()  # nothing half written in sight
    report = offline.calibrate(gpu="h100", echo=lambda s: None)
    assert ran == [("model", False)]
    assert report["tiles"] == report["overlap"] == "done earlier"
    assert isinstance(report["model"], float) and report["nccl"] == "skipped: needs two GPUs"
    # A part whose file went missing is not done, whatever the manifest says (and the parts after
    # it, which read it, run again).
    (store.calibration_dir("h100") / store.TILES).unlink()
    ran.clear()
    offline.calibrate(gpu="h100", echo=lambda s: None)
    assert ran == [("tiles", False), ("overlap", False), ("model", False)]
    ran.clear()
    offline.calibrate(gpu="h100", force=True, echo=lambda s: None)
    assert [p for p, _ in ran] == ["tiles", "overlap", "model"]


def test_a_part_run_again_makes_the_parts_after_it_run_again(fake_parts):
    """The model is fitted on the overlap sweep: a new sweep (killed or not) leaves no old fit
    counting as done."""
    ran, fail = fake_parts
    offline.calibrate(gpu="h100", echo=lambda s: None)
    fail.add("overlap")
    with pytest.raises(KeyboardInterrupt):
        offline.calibrate(["overlap"], force=True, gpu="h100", echo=lambda s: None)
    fail.clear()
    ran.clear()
    report = offline.calibrate(gpu="h100", echo=lambda s: None)
    assert ran == [("overlap", False), ("model", False)] and report["tiles"] == "done earlier"


def test_a_quick_calibration_does_not_stand_for_a_full_one(fake_parts):
    ran, _ = fake_parts
    offline.calibrate(["tiles"], quick=True, gpu="h100", echo=lambda s: None)
    ran.clear()
    offline.calibrate(["tiles"], quick=True, gpu="h100", echo=lambda s: None)
    assert ran == []  # quick after quick: done
    offline.calibrate(["tiles"], gpu="h100", echo=lambda s: None)
    assert ran == [("tiles", False)]
    ran.clear()
    offline.calibrate(["tiles"], quick=True, gpu="h100", echo=lambda s: None)
    assert ran == []  # a full table serves a quick request


def test_a_cut_short_manifest_counts_nothing_as_done(fake_parts):
    ran, _ = fake_parts
    offline.calibrate(["tiles"], gpu="h100", echo=lambda s: None)
    (store.calibration_dir("h100") / offline.MANIFEST).write_text('{"parts": {"tiles": ')
    ran.clear()
    offline.calibrate(["tiles"], gpu="h100", echo=lambda s: None)
    assert ran == [("tiles", False)]


@pytest.mark.parametrize("quick, folder", [(False, "h100"), (True, "h100-quick")])
def test_record_copies_into_the_folder_its_thoroughness_names(fake_parts, places, quick, folder):
    offline.calibrate(["tiles"], quick=quick, record=True, gpu="h100", echo=lambda s: None)
    assert (places / "data" / folder / store.TILES).read_text() == "tiles"
    other = "h100" if quick else "h100-quick"
    assert not (places / "data" / other).exists()


def test_unknown_parts_are_refused_before_anything_runs(fake_parts):
    ran, _ = fake_parts
    with pytest.raises(ValueError, match="unknown calibration part"):
        offline.calibrate(["tiles", "tile"], gpu="h100")
    assert ran == []


@pytest.mark.parametrize("argv, says", [(["--parts", "tile"], "--parts takes a comma-separated subset"),
                                        (["--parts", ","], "--parts takes a comma-separated subset"),
                                        ([], "no CUDA GPU visible")])
def test_the_command_refuses_in_one_line(argv, says, capsys, monkeypatch, tmp_path):
    import torch

    from fo_lib import cli
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["calibrate", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
    assert not (tmp_path / "calibration").exists()  # nothing written


def test_the_command_reports_each_part_and_the_total(fake_parts, capsys, monkeypatch):
    from fo_lib import cli
    monkeypatch.setattr(offline, "calibrate", _with_gpu(offline.calibrate))
    assert cli.main(["calibrate", "--quick", "--parts", "tiles,model"]) == 0
    out = capsys.readouterr().out
    assert "tiles" in out and "model" in out and "overlap" not in out and "in all" in out


def _with_gpu(calibrate):
    def run(*args, **kw):
        return calibrate(*args, gpu="h100", **kw)
    return run


def test_kernels_tunings_and_calibrations_share_one_cache_folder(tmp_path, monkeypatch):
    """One cache root: $FO_CACHE_DIR, else $XDG_CACHE_HOME/fo_lib (the kernel cache once ignored XDG)."""
    from fo_lib import jit, store
    from fo_lib.gemm import config_tuning

    monkeypatch.delenv("FO_CACHE_DIR", raising=False)
    monkeypatch.delenv(config_tuning.FILE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    root = tmp_path / "fo_lib"
    assert jit.cache_dir() == root and config_tuning.cache_path().parent == root
    assert store.calibration_dir("h100") == root / "calibration" / "h100"
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert jit.cache_dir() == tmp_path / "elsewhere" == store.calibration_dir("h100").parents[1]
