"""The Nsight Compute driver of the Hopper GEMM against cuBLAS: its config labels read back."""
from dataclasses import replace

import pytest

from fo_lib.gemm import sm90
from fo_lib.reports import ncu

from fake_ncu import calls, make
from script_loader import load_script

prof = load_script("scripts/profile/profile_sm90_vs_cublas.py")


@pytest.mark.parametrize("name", sorted(sm90.CONFIGS))
def test_every_label_reads_back_as_its_config(name):
    base = sm90.CONFIGS[name]
    for order, swizzle, sk in (("row", 8, False), ("col", 2, False), ("row", 1, base.cluster == 1)):
        cfg = replace(base.with_raster(order, swizzle), stream_k=sk)
        assert prof.parse_label(sm90.config_label(cfg)) == cfg


def test_the_default_shapes_name_known_configs():
    assert all(prof.parse_label(label).tile_name for *_, label in prof.SHAPES)


@pytest.mark.parametrize("label", ["128x256x64", "128x300x64/row8", "128x256x64/diag8", "x/row8+sk"])
def test_a_bad_label_is_one_line(label):
    with pytest.raises(SystemExit, match="not a config label"):
        prof.parse_label(label)


@pytest.mark.parametrize("label,match", [("128x176x64c2/row8+sk", "stream_k"), ("128x256x64/row0", "swizzle")])
def test_a_config_the_kernel_cannot_run_is_refused(label, match):
    with pytest.raises(SystemExit, match=match):
        prof.parse_label(label)


DETAILS = ('"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
           '"0","fo_gemm_sm90_nt_m128n256k64_s3_bf16_plain","GPU Speed Of Light Throughput","Elapsed Cycles",'
           '"cycle","253,510"\n'
           '"1","nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT","GPU Speed Of Light Throughput","Elapsed Cycles",'
           '"cycle","245,154"\n')


def test_details_page_is_read_past_ncus_own_lines():
    t = ncu.read_details_csv("==WARNING== unmodified GPU clocks\n==PROF== Connected\n" + DETAILS)
    assert t["Metric Value"].tolist() == ["253,510", "245,154"] and t["ID"].tolist() == ["0", "1"]
    with pytest.raises(ValueError, match="no details table"):
        ncu.read_details_csv("==PROF== no kernels were profiled\n")
    with pytest.raises(ValueError, match="lacks"):
        ncu.read_details_csv('"ID","Kernel Name"\n"0","k"\n')


def test_out_runs_ncu_on_itself_and_writes_a_sidecar(tmp_path, capsys):
    import json

    import pandas as pd

    fake = make(tmp_path, {"": DETAILS})
    out = tmp_path / "o" / "sm90_ncu.csv"
    prof.main(["--out", str(out), "--ncu", str(fake), "--shape", "2048", "4096", "7168", "128x256x64/row8",
               "--shape", "1100", "1792", "5120", "auto"])
    assert pd.read_csv(out, dtype=str)["Metric Value"].tolist() == ["253,510", "245,154"]
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["shapes"] == ["2048 4096 7168 128x256x64/row8", "1100 1792 5120 auto"] and meta["gpu"]
    assert not list(out.parent.glob("*.ncu-rep"))
    profiled, export = calls(tmp_path)
    assert "--nvtx --nvtx-include profile/" in profiled and "--clock-control none" in profiled
    assert all(f"--section {sec}" in profiled for sec in prof.SECTIONS)
    assert "--shape 2048 4096 7168 128x256x64/row8 --shape 1100 1792 5120 auto" in profiled
    assert "--csv --page details" in export


def test_out_stops_on_a_bad_label_before_ncu(tmp_path):
    with pytest.raises(SystemExit, match="not a config label"):
        prof.main(["--out", str(tmp_path / "x.csv"), "--ncu", "false", "--shape", "1", "2", "3", "128x999x64/row8"])
    assert not (tmp_path / "x.csv").exists()
