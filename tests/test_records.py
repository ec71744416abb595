"""fo_lib.records: every stored form of a GEMM profile and a latency curve reads back, a record
holding several is chosen from by shape, primitive, world size and NCCL CTA budget, and a wrong
choice is one line naming what the record holds; ``python -m fo_lib tune`` reads them all."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fo_lib.profiles import BandwidthCurve, GemmProfile, ProfileError
from fo_lib.records import bundle, read_curve, read_profile

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = ROOT / "data/h200/overlap_loopback_profiles.json"   # one GPU: profiles + curves
NCCL = ROOT / "data/h200x2/overlap_nccl_profiles.json"         # per NCCL CTA budget
CURVES_CSV = ROOT / "data/h200x2/nccl_curves.csv"


def test_a_bundle_reads_as_profiles_and_curves_by_key():
    profiles, curves = bundle(LOOPBACK)
    assert len(profiles) == 18 and set(curves) == {(0, "all_reduce"), (0, "reduce_scatter"), (0, "all_to_all")}
    p = profiles[(0, "all_reduce", 4096, 8192, 8192)]
    assert isinstance(p, GemmProfile) and p.M == 4096 and len(p.wave_ms) == len(p.wave_bytes) == 8
    budgets = {k[0] for k in bundle(NCCL)[0]}
    assert budgets == {0, 8, 16}


def test_a_profile_is_chosen_by_shape_and_primitive():
    p, prim, budget = read_profile(LOOPBACK, (4096, 8192, 8192), "reduce_scatter")
    assert (p.M, p.N, p.K, prim, budget) == (4096, 8192, 8192, "reduce_scatter", 0)
    p, prim, budget = read_profile(NCCL, (4096, 8192, 8192), "all_reduce", 8)
    assert (prim, budget, p.comm_sms) == ("all_reduce", 8, 8)


def test_a_single_profile_file_reads_as_itself(tmp_path):
    p, _, _ = read_profile(LOOPBACK, (2048, 8192, 8192), "all_reduce")
    p.save(tmp_path / "p.json")
    assert read_profile(tmp_path / "p.json") == (p, None, None)


@pytest.mark.parametrize("kw,match", [
    (dict(), r"18 profiles for no selection; it holds primitive all_reduce, all_to_all, reduce_scatter; "
             r"M 2048, 4096, 8192; K 8192, 16384"),
    (dict(shape=(4096, 8192, 8192)), r"3 profiles for M=4096 N=8192 K=8192"),
    (dict(shape=(4096, 8192, 1024), primitive="all_reduce"), r"no profile for primitive=all_reduce M=4096"),
])
def test_an_unclear_or_missing_choice_names_what_the_record_holds(kw, match):
    with pytest.raises(ProfileError, match=match):
        read_profile(LOOPBACK, **kw)


def test_curves_read_from_a_curve_file_a_bundle_and_the_nccl_table(tmp_path):
    c = read_curve(LOOPBACK, "all_to_all")
    assert isinstance(c, BandwidthCurve) and c.primitive == "all_to_all" and c.world_size == 2
    c.save(tmp_path / "c.json")
    assert read_curve(tmp_path / "c.json") == c
    for budget, prim in ((0, "all_to_all"), (8, "all_reduce"), (16, "reduce_scatter")):
        t = read_curve(CURVES_CSV, prim, 2, budget)
        assert t.primitive == prim and t.world_size == 2 and t.meta["budget"] == budget
        assert len(t.points) == 33 and list(t.sizes) == sorted(t.sizes)
    with pytest.raises(ProfileError, match="3 curves for primitive=all_reduce; it holds budget 0, 8, 16"):
        read_curve(CURVES_CSV, "all_reduce")


@pytest.mark.parametrize("text,match", [("a,b\n1,2\n", "needs the columns"),
                                        ("primitive,world,bytes,ms\nall_reduce,2,x,1\n", "not a number")])
def test_a_bad_curves_table_is_one_line(tmp_path, text, match):
    (tmp_path / "c.csv").write_text(text)
    with pytest.raises(ProfileError, match=match):
        read_curve(tmp_path / "c.csv")


def test_a_bundle_of_the_wrong_shape_is_refused(tmp_path):
    (tmp_path / "b.json").write_text(json.dumps({"0": {"curves": {}}}))
    with pytest.raises(ProfileError):
        read_profile(tmp_path / "b.json")


def _tune(*args):
    return subprocess.run([sys.executable, "-m", "fo_lib", "tune", *args], capture_output=True, text=True, cwd=ROOT)


def test_tune_reads_the_shipped_records():
    out = _tune("--profile", str(LOOPBACK), "--shape", "4096x8192x8192", "--primitive", "all_reduce",
                "--model", "refined", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert sum(doc["partition"]) == 8 and doc["predicted_ms"] < doc["no_overlap"]["predicted_ms"]
    out = _tune("--profile", str(NCCL), "--shape", "4096x8192x8192", "--primitive", "all_reduce", "--budget", "8",
                "--curve", str(CURVES_CSV), "--json")
    assert out.returncode == 0, out.stderr
    assert sum(json.loads(out.stdout)["partition"]) == 9


@pytest.mark.parametrize("args,match", [
    (("--profile", str(LOOPBACK)), "18 profiles for no selection"),
    (("--waves", "4", "--wave-ms", "1", "--bytes-per-wave", "1000"), "--curve is needed"),
    (("--profile", str(LOOPBACK), "--shape", "4096x8192"), "expected MxNxK"),
])
def test_tune_refuses_an_unclear_record_in_one_line(args, match):
    out = _tune(*args)
    assert out.returncode == 2 and match in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
