import json
import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from fo_lib.cli import main


@pytest.fixture
def curve(tmp_path):
    path = tmp_path / "curve.json"
    path.write_text(json.dumps({"points": [[1000, 0.01], [1_000_000, 0.05], [100_000_000, 2.0],
                                           [1_000_000_000, 18.0]]}))
    return path


def test_tune_json_exact_flags(curve):
    # The exact command line of the foundation issue, in a subprocess.
    out = subprocess.run([sys.executable, "-m", "fo_lib", "tune", "--waves", "6", "--wave-ms", "0.5",
                          "--bytes-per-wave", "8000000", "--curve", str(curve), "--model", "paper", "--json"],
                         capture_output=True, text=True, check=True).stdout
    doc = json.loads(out)
    assert sum(doc["partition"]) == 6 and all(g >= 1 for g in doc["partition"])
    assert doc["predicted_ms"] <= doc["no_overlap"]["predicted_ms"]
    assert doc["finest"]["partition"] == [1] * 6
    assert doc["no_overlap"]["partition"] == [6]
    assert doc["model"] == "paper"


def test_tune_table_and_profile_file(curve, tmp_path, capsys):
    from fo_lib.profiles import GemmProfile
    GemmProfile.synthetic(5, 0.4, 4_000_000).save(tmp_path / "p.json")
    assert main(["tune", "--profile", str(tmp_path / "p.json"), "--curve", str(curve), "--model", "refined"]) == 0
    out = capsys.readouterr().out
    assert "best overlapped" in out and "predicted speedup" in out


@pytest.mark.parametrize("argv, msg", [
    (["--waves", "4", "--wave-ms", "1"], "needs --bytes-per-wave"),
    (["--waves", "4", "--wave-ms", "1", "--bytes-per-wave", "1"], "outside the sampled range|needs latencies"),
])
def test_tune_errors(curve, capsys, argv, msg):
    assert main(["tune", "--curve", str(curve), *argv]) == 2
    import re
    assert re.search(msg, capsys.readouterr().err)


def test_tune_rejects_nonpositive(curve):
    with pytest.raises(SystemExit):
        main(["tune", "--curve", str(curve), "--waves", "0", "--wave-ms", "1", "--bytes-per-wave", "1"])


def test_tune_malformed_curve(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["tune", "--curve", str(bad), "--waves", "2", "--wave-ms", "1", "--bytes-per-wave", "1"]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_info_runs_without_gpu(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "python" in out and "gpu" in out


# --- bad input through the real entry point: exit code 2, one line on stderr, no traceback -------
SYNTHETIC = ["--waves", "4", "--wave-ms", "1", "--bytes-per-wave", "1000000"]


def _cli(*argv, env=None):
    import os
    import time
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "fo_lib", *map(str, argv)], capture_output=True, text=True,
                          env=None if env is None else {**os.environ, **env}, timeout=120)
    return proc, time.perf_counter() - t0


def _assert_one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "error:" in lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize("doc, needles", [
    ('{"points": [[1000, 0.01], null]}', ["point 1", "null"]),
    ('{"points": [[1000, 0.01], [null, 0.5]]}', ["point 1", "bytes"]),
    ('{"points": [[1000, 0.01], [1e9]]}', ["point 1"]),
    ('{"points": [[1000, 0.01], [1e9, 5]], "world_size": [2]}', ["world_size", "[2]"]),
    ('{"points": [[1000, 0.01], [1e9, "abc"]]}', ["point 1", "'abc'"]),
    ('{"points": [[1000, 0.01], [1e9, true]]}', ["point 1", "True"]),
])
def test_cli_malformed_curve_one_line(tmp_path, doc, needles):
    path = _write(tmp_path, "curve.json", doc)
    proc, _ = _cli("tune", "--curve", path, *SYNTHETIC)
    _assert_one_line_error(proc, str(path), *needles)


def test_cli_non_utf8_curve_names_file_and_position(tmp_path):
    content = b'{"points": [[1000, 0.01],\n [1e9, 5]], "link": "\xff"}'
    path = _write(tmp_path, "curve.json", content)
    proc, _ = _cli("tune", "--curve", path, *SYNTHETIC)
    offset = content.index(b"\xff")
    _assert_one_line_error(proc, str(path), "UTF-8", f"offset {offset} (line 2)")


def test_cli_refuses_a_search_it_cannot_hold_quickly(curve):
    from fo_lib.partition import MAX_SEARCH_WAVES
    for model in ("refined", "paper"):
        proc, seconds = _cli("tune", "--curve", curve, "--waves", 100000, "--wave-ms", "0.01",
                             "--bytes-per-wave", "1000", "--model", model)
        _assert_one_line_error(proc, "100000 waves", f"at most {MAX_SEARCH_WAVES} waves")
        assert seconds < 5.0
    # The limit itself is a valid size.
    proc, _ = _cli("tune", "--curve", curve, "--waves", MAX_SEARCH_WAVES, "--wave-ms", "0.01",
                   "--bytes-per-wave", "1000", "--model", "refined", "--json")
    assert proc.returncode == 0 and sum(json.loads(proc.stdout)["partition"]) == MAX_SEARCH_WAVES


def test_cli_profile_with_too_many_waves(curve, tmp_path):
    from fo_lib.partition import MAX_SEARCH_WAVES
    from fo_lib.profiles import GemmProfile
    GemmProfile.synthetic(MAX_SEARCH_WAVES + 1, 0.01, 1000).save(tmp_path / "p.json")
    proc, _ = _cli("tune", "--curve", curve, "--profile", tmp_path / "p.json", "--model", "refined")
    _assert_one_line_error(proc, f"at most {MAX_SEARCH_WAVES} waves")


def test_cli_build_without_gpu_points_at_arch():
    # No visible GPU (also where CuPy is missing): one line that says --arch compiles without one.
    proc, _ = _cli("build", env={"CUDA_VISIBLE_DEVICES": ""})
    _assert_one_line_error(proc, "--arch sm_XX", "sm_90a")


def test_cli_argparse_errors_are_one_line(curve):
    for argv in (["tune", "--curve", curve, "--waves", "abc"], ["tune", "--curve", curve, *SYNTHETIC,
                                                                 "--model", "refined", "--launch-ms", "-1"], []):
        proc, _ = _cli(*argv)
        _assert_one_line_error(proc)


def test_cli_warns_on_falling_curve(tmp_path):
    path = _write(tmp_path, "curve.json", json.dumps({"points": [[1000, 0.5], [1e6, 0.05], [1e9, 5.0]]}))
    proc, _ = _cli("tune", "--curve", path, *SYNTHETIC, "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "warning:" in lines[0] and str(path) in lines[0] and "point 1" in lines[0]
    assert json.loads(proc.stdout)["partition"]


@pytest.mark.parametrize("flags, ignored", [
    (["--launch-ms", "5"], ["--launch-ms"]),
    (["--launch-ms", "0", "--comm-slowdown", "1.2", "--gemm-slowdown", "1.1"],
     ["--launch-ms", "--comm-slowdown", "--gemm-slowdown"]),
])
def test_cli_warns_on_options_the_model_ignores(curve, flags, ignored):
    proc, _ = _cli("tune", "--curve", curve, *SYNTHETIC, "--model", "paper", *flags, "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["model"] == "paper"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "warning:" in lines[0] and "ignores" in lines[0]
    assert all(flag in lines[0] for flag in ignored)
    # The refined model reads them: no warning there.
    proc, _ = _cli("tune", "--curve", curve, *SYNTHETIC, "--model", "refined", *flags, "--json")
    assert proc.returncode == 0 and proc.stderr == ""


def test_cli_bugs_keep_their_traceback(curve, monkeypatch):
    # Only input and environment errors become one line; any other exception is a bug to show.
    import fo_lib.cli as cli

    def broken(args):
        raise ValueError("an internal bug")
    monkeypatch.setattr(cli, "_cmd_tune", broken)
    with pytest.raises(ValueError, match="internal bug"):
        cli.main(["tune", "--curve", str(curve), *SYNTHETIC])


@given(doc=st.fixed_dictionaries({}, optional={
    "points": st.recursive(st.none() | st.booleans() | st.integers(-5, 10**12) | st.floats() | st.text(max_size=3),
                           lambda inner: st.lists(inner, max_size=4), max_leaves=12),
    "world_size": st.none() | st.integers(-2, 8) | st.floats() | st.lists(st.integers(1, 4), max_size=2)
                  | st.text(max_size=2),
    "primitive": st.sampled_from(["all_reduce", "bogus", None, 3]),
    "link": st.none() | st.text(max_size=3),
    "meta": st.none() | st.dictionaries(st.text(max_size=2), st.integers(), max_size=2) | st.lists(st.integers()),
}))
def test_any_curve_document_is_valid_or_a_profile_error(doc):
    # What --curve may contain: a curve comes out, or a ProfileError the CLI prints as one line.
    from fo_lib.profiles import BandwidthCurve, ProfileError
    try:
        BandwidthCurve.from_dict(doc)
    except ProfileError:
        pass


def test_gemm_tunings_lists_and_clears_what_autotuning_remembered(tmp_path, monkeypatch):
    import json as _json

    from fo_lib.gemm import config_tuning, sm90
    env = {"FO_CACHE_DIR": str(tmp_path)}
    proc, _ = _cli("gemm-tunings", env=env)
    assert proc.returncode == 0 and "no remembered Hopper GEMM tunings" in proc.stdout
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path))
    config_tuning.forget()
    try:
        won = sm90.CONFIGS["128x176x64c2"].with_raster("row", 8)
        model = sm90.CONFIGS["128x256x64"].with_raster("row", 8)
        k = config_tuning.key("NVIDIA H200", 132, 2048, 7168, 5120, "bf16", sm90.kernel_digest("bf16"))
        config_tuning.remember(k, won, {sm90.config_label(won): 0.2, sm90.config_label(model): 0.22},
                          sm90.config_label(model))
        old = config_tuning.key("NVIDIA H200", 132, 1100, 1792, 5120, "bf16", "an older config set")
        config_tuning.remember(old, model, {sm90.config_label(model): 0.04}, sm90.config_label(model))
    finally:
        config_tuning.forget()
    proc, _ = _cli("gemm-tunings", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "2 remembered Hopper GEMM tunings" in proc.stdout
    assert "2048 x 7168 x 5120 bf16: 128x176x64c2/row8, 1.100x the model's 128x256x64/row8" in proc.stdout
    assert "1100 x 1792 x 5120 bf16: 128x256x64/row8 (the model's pick) [another kernel version: unused]" in proc.stdout
    proc, _ = _cli("gemm-tunings", "--json", env=env)
    rows = _json.loads(proc.stdout)["tunings"]
    assert [r["stale"] for r in rows] == [True, False] and rows[1]["config"] == "128x176x64c2/row8"
    data = _json.loads((tmp_path / config_tuning.FILE_NAME).read_text())
    (tmp_path / config_tuning.FILE_NAME).write_text(_json.dumps(dict(data, garbage={"config": {"BN": 7}})))
    proc, _ = _cli("gemm-tunings", env=env)
    assert proc.returncode == 0 and "garbage: unreadable entry (another version)" in proc.stdout
    proc, _ = _cli("gemm-tunings", "--clear", env=env)
    assert proc.returncode == 0 and "removed 3 remembered" in proc.stdout
    assert not (tmp_path / config_tuning.FILE_NAME).exists()


@pytest.mark.parametrize("content, problem", [("{not json", "not valid JSON"), ("[1, 2]", "an array"),
                                              ("[" * 100_000 + "]" * 100_000, "nested too deeply")])
def test_gemm_tunings_lists_a_corrupt_file_in_one_line_and_clears_it(tmp_path, monkeypatch, capsys, content,
                                                                     problem):
    from fo_lib.gemm import config_tuning
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path))
    path = tmp_path / config_tuning.FILE_NAME
    path.write_text(content)
    assert main(["gemm-tunings"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and len(out.splitlines()) == 1, (out, err)
    assert "unreadable" in out and str(path) in out and problem in out
    assert main(["gemm-tunings", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert err == "" and doc["tunings"] == [] and problem in doc["unreadable"] and doc["path"] == str(path)
    assert main(["gemm-tunings", "--clear"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and len(out.splitlines()) == 1 and "removed the unreadable" in out
    assert not path.exists()


# --- out-of-range numbers and hostile JSON: every one is a one-line error, never a traceback --------
DEEP = "[" * 100_000 + "]" * 100_000
PROFILE = dict(format="fo_lib.gemm_profile", version=1, M=1, N=1, K=1, dtype="bf16", config={}, sm_count=132,
               comm_sms=0, ctas=132, wave_ms=[0.5] * 4, wave_bytes=[1_000_000] * 4, full_ms=2.0)


@pytest.mark.parametrize("flags, needle", [
    (["--waves", "4", "--wave-ms", "1", "--bytes-per-wave", "1" + "0" * 400], "--bytes-per-wave is beyond a float's range"),
    (["--waves", "4", "--wave-ms", "1", "--bytes-per-wave", "1" + "0" * 30], "2**63 bytes"),
    (["--waves", "4", "--wave-ms", "1e308", "--bytes-per-wave", "1000"], "finite time"),
    (["--waves", "1" + "0" * 400, "--wave-ms", "1", "--bytes-per-wave", "1000"], "more memory than exists"),
    ([*SYNTHETIC, "--model", "refined", "--launch-ms", "1e308"], "not finite"),
    ([*SYNTHETIC, "--model", "refined", "--launch-ms", "1e308", "--json"], "not finite"),
    ([*SYNTHETIC, "--model", "refined", "--gemm-slowdown", "1e308", "--json"], "not finite"),
])
def test_cli_numbers_out_of_range_are_one_line(curve, flags, needle):
    proc, _ = _cli("tune", "--curve", curve, *flags)
    _assert_one_line_error(proc, needle)
    assert proc.stdout == ""  # neither inf in a table nor Infinity in the JSON


@pytest.mark.parametrize("doc, needle", [
    (DEEP, "nested too deeply"),
    ('{"points": ' + DEEP + "}", "nested too deeply"),
    ('{"a":' * 100_000 + "1" + "}" * 100_000, "nested too deeply"),
    ('{"points": [[1000, 0.01], [1' + "0" * 5000 + ", 1]]}", "4300 digits"),
    ('{"points": [[1000, 0.01], [1' + "0" * 400 + ", 1]]}", "beyond a float's range"),
    ('{"profiles": [], "curves": {"all_reduce": {"points": ' + DEEP + "}}}", "nested too deeply"),
])
def test_cli_hostile_curve_json_is_one_line(tmp_path, doc, needle):
    path = _write(tmp_path, "curve.json", doc)
    proc, _ = _cli("tune", "--curve", path, *SYNTHETIC)
    _assert_one_line_error(proc, str(path), needle)


@pytest.mark.parametrize("doc, needle", [
    (DEEP, "nested too deeply"),
    (json.dumps(PROFILE).replace("[1000000, 1000000, 1000000, 1000000]", "[1" + "0" * 400 + "]"), "beyond a float's range"),
    (json.dumps(dict(PROFILE, wave_ms=[1e308] * 4, full_ms=1e308)), "durations add up"),
    (json.dumps(dict(PROFILE, config=[1])), "config an object"),
    ('{"profiles": [1]}', "profile 0: expected an object"),
    ('{"profiles": [], "curves": [1]}', "'curves'"),
    ('{"profiles": [], "curves": {"all_reduce": 5}}', "curve all_reduce: expected an object"),
])
def test_cli_hostile_profile_json_is_one_line(curve, tmp_path, doc, needle):
    path = _write(tmp_path, "profile.json", doc)
    proc, _ = _cli("tune", "--curve", curve, "--profile", path)
    _assert_one_line_error(proc, str(path), needle)


def test_cli_refuses_a_world_the_curve_is_not_of(curve):
    proc, _ = _cli("tune", "--curve", curve, *SYNTHETIC, "--world", "1" + "0" * 400)
    _assert_one_line_error(proc, "world size 2, not the 1000")


def test_cli_curves_table_with_a_short_row_is_one_line(tmp_path):
    path = _write(tmp_path, "nccl_curves.csv", "primitive,world,bytes,ms\nall_reduce,2,1000\nall_reduce,2,1e9,1\n")
    proc, _ = _cli("tune", "--curve", path, *SYNTHETIC)
    _assert_one_line_error(proc, str(path), "short")


def test_cli_json_out_is_strict(tmp_path, monkeypatch):
    # A remembered tuning whose time is NaN (a hand-edited file): strict JSON cannot carry it.
    from fo_lib.gemm import config_tuning, sm90
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path))
    config_tuning.forget()
    try:
        cfg = sm90.CONFIGS["128x256x64"].with_raster("row", 8)
        k = config_tuning.key("NVIDIA H200", 132, 256, 256, 256, "bf16", sm90.kernel_digest("bf16"))
        config_tuning.remember(k, cfg, {sm90.config_label(cfg): 0.25}, sm90.config_label(cfg))
    finally:
        config_tuning.forget()
    path = tmp_path / config_tuning.FILE_NAME
    path.write_text(path.read_text().replace("0.25", "NaN"))
    proc, _ = _cli("gemm-tunings", "--json", env={"FO_CACHE_DIR": str(tmp_path)})
    _assert_one_line_error(proc, "non-finite")
    assert proc.stdout == ""
