"""CPU checks of fo_lib.reports.ncu's reading of ncu's source page and its classes (what
scripts/profile/profile_stall_sites.py runs on the GPU's output)."""
import pytest

from fo_lib.reports import ncu

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
          '"Instructions Executed","stall_barrier","stall_wait","stall_barrier (Not Issued)"')


def source_page(rows):
    lines = ['==PROF== Connected to process 1', '"Kernel Name","fo_gemm_nt_m256n128k64_w4x2_s3_bf16_plain",', HEADER]
    lines += [",".join(f'"{v}"' for v in row) for row in rows]
    return "\n".join(lines) + "\n"


ROWS = [("0x10", "HMMA.16816.F32.BF16 R4, R132, R136, R4", "1,200", "900", "2,097,152", "0", "300", "0"),
        ("0x20", "BAR.SYNC.DEFER_BLOCKING 0x0", "40", "30", "16,384", "35", "5", "30"),
        ("0x30", "MEMBAR.ALL.GPU", "7", "7", "1,916", "0", "0", "0"),
        ("0x40", "MOV R4, 0x1", "2", "1", "0", "0", "2", "0")]


def test_source_page_is_read_with_separators_and_stall_columns():
    df = ncu.read_source_csv(source_page(ROWS))
    assert df.samples.tolist() == [1200, 40, 7, 2]
    assert df.executed.tolist() == [2097152, 16384, 1916, 0]
    assert df.sass[1] == "BAR.SYNC.DEFER_BLOCKING 0x0"
    assert df.stall_barrier.tolist() == [0, 35, 0, 0]
    assert "stall_barrier (Not Issued)" not in df  # the not-issued split is not double counted


def test_classes_follow_executions_per_warp_tile():
    # 2048 tiles x 8 warps, 16 k-tiles per tile (8192 x 8192 x 1024 in 256 x 128 x 64 tiles).
    cls = ncu.classify([2097152 * 2, 16384 * 8 * 16, 16384 * 8, 16384 * 8 * 1.9, 1916, 0], 16384 * 8, 16)
    assert cls == ["k-tile", "k-tile", "tile", "tile", "rare", "never"]


def test_summary_sums_each_class():
    df = ncu.read_source_csv(source_page(ROWS))
    df["cls"] = ncu.classify(df.executed, 16384, 128)
    rows = {r["cls"]: r for r in ncu.summarize(df, variant="plain")}
    assert rows["k-tile"]["samples"] == 1200 and rows["k-tile"]["wait"] == 300
    assert rows["tile"]["barrier"] == 35 and rows["tile"]["instructions"] == 1
    assert rows["rare"]["samples"] == 7 and rows["never"]["samples"] == 2
    assert all(r["variant"] == "plain" and r["long_sb"] == 0 for r in rows.values())


@pytest.mark.parametrize("text,match", [("==PROF== no kernels were profiled\n", "no source table"),
                                        ('"Address","Source"\n"0x10","NOP"\n', "lacks")])
def test_unreadable_output_is_an_error(text, match):
    with pytest.raises(ValueError, match=match):
        ncu.read_source_csv(text)


def test_the_whole_run_with_a_fake_ncu(tmp_path, monkeypatch, capsys):
    """The script's flow (a report per shape and variant, its source page kept as .csv.gz, the class
    summary with its sidecar) with a stand-in for ncu."""
    import pandas as pd

    from fake_ncu import calls, make
    from script_loader import load_script

    from fo_lib import gemm

    mod = load_script("scripts/profile/profile_stall_sites.py")
    monkeypatch.setattr(gemm, "sm_count", lambda *a: 132)
    fake = make(tmp_path, {"": source_page(ROWS)})
    out = tmp_path / "stalls"
    mod.main(["--out-dir", str(out), "--ncu", str(fake), "--shapes", "8192x8192x1024", "--variants", "plain"])
    summary = pd.read_csv(out / "summary.csv")
    assert summary.samples.sum() == 1249 and set(summary.variant) == {"plain"}
    assert [p.name for p in out.glob("*.csv.gz")] == ["8192x8192x1024_plain.csv.gz"]
    assert not list(out.glob("*.ncu-rep"))
    profiled, export = calls(tmp_path)
    assert "--section SourceCounters" in profiled and "regex:fo_gemm_nt_.*_plain$" in profiled
    assert "--page source --csv --print-source sass" in export
