import json
import subprocess
import sys

import pytest

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
