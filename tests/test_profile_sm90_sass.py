"""CPU checks of the Hopper-against-cuBLAS opcode profile: opcodes read from SASS lines, counts per
unit of work, the side-by-side table (what scripts/profile/profile_sm90_sass.py prints on the GPU)."""

import pytest

from fo_lib.reports import ncu

from fake_ncu import calls, make
from script_loader import load_script

prof = load_script("scripts/profile/profile_sm90_sass.py")

HEADER = '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed"'


def page(rows):
    return "\n".join(['==PROF== Connected to process 1', HEADER]
                     + [",".join(f'"{v}"' for v in r) for r in rows]) + "\n"


@pytest.mark.parametrize("sass,op", [("@!P0 IMAD.WIDE.U32 R2, R3, 0x4, R4", "IMAD"),
                                     ("HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], R24", "HGMMA"),
                                     ("@P1 SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [UR6], RZ", "SYNCS"),
                                     ("EXIT", "EXIT"), ("", "")])
def test_opcode_drops_predicate_and_modifiers(sass, op):
    assert ncu.opcode(sass) == op


def test_opcode_mix_counts_per_unit_of_work():
    # 256 x 128 x 64: two units of 128 x 128 x 64.
    df = ncu.read_source_csv(page([("0x10", "HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], R24", "50", "40", "8"),
                                   ("0x20", "IMAD R2, R3, R4, R5", "5", "1", "30"),
                                   ("0x30", "@P0 IMAD.WIDE R6, R3, R4, R6", "1", "1", "10"),
                                   ("0x40", "BRA 0x10", "0", "0", "0")]))
    rows = ncu.opcode_mix(df, 256, 128, 64, kernel="ours")
    assert [r["opcode"] for r in rows[:2]] == ["IMAD", "HGMMA"]
    imad = rows[0]
    assert imad["executed"] == 40 and imad["per_unit"] == 20.0 and imad["instructions"] == 2
    assert imad["samples"] == 6 and imad["kernel"] == "ours" and (imad["M"], imad["N"], imad["K"]) == (256, 128, 64)
    assert rows[-1]["opcode"] == "BRA" and rows[-1]["executed"] == 0


def test_side_by_side_puts_the_largest_difference_first_and_totals():
    rows = ([dict(M=1, N=2, K=3, kernel="ours", opcode=o, per_unit=v) for o, v in (("IMAD", 30.0), ("HGMMA", 4.0))]
            + [dict(M=1, N=2, K=3, kernel="cublas", opcode=o, per_unit=v) for o, v in (("IMAD", 6.0), ("HGMMA", 4.0),
                                                                                       ("UIADD3", 2.0))])
    t = prof.side_by_side(rows)
    assert list(t.index) == ["IMAD", "UIADD3", "HGMMA", "total"]
    assert t.loc["IMAD", "ours - cublas"] == 24.0 and t.loc["UIADD3", "ours"] == 0.0
    assert t.loc["total", "ours"] == 34.0 and t.loc["total", "cublas"] == 12.0
    assert set(t["shape"]) == {"1x2x3"}


def test_a_bad_label_stops_before_ncu(capsys):
    with pytest.raises(SystemExit, match="not a config label"):
        prof.main(["--out-dir", "/nonexistent", "--shape", "1", "2", "3", "128x999x64/row8", "--ncu", "false"])


def test_the_whole_run_with_a_fake_ncu(tmp_path, capsys):
    """main's own flow (one report per kernel, its export, the summary and sidecar) with a stand-in
    for ncu that writes the report it is asked for and exports a fixed source page per kernel."""
    import json

    import pandas as pd

    pages = {"ours": page([("0x10", "HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], R24", "5", "4", "4"),
                           ("0x20", "IMAD R2, R3, R4, R5", "5", "1", "64")]),
             "cublas": page([("0x10", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24", "5", "4", "8"),
                             ("0x20", "IMAD R2, R3, R4, R5", "5", "1", "8")])}
    fake = make(tmp_path, pages)
    out = tmp_path / "sass"
    prof.main(["--out-dir", str(out), "--ncu", str(fake), "--shape", "256", "128", "64", "128x256x64/row8"])
    summary = pd.read_csv(out / "summary.csv")
    imad = summary.set_index(["kernel", "opcode"]).per_unit
    assert imad[("ours", "IMAD")] == 32.0 and imad[("cublas", "IMAD")] == 4.0  # two units of work
    assert json.loads((out / "summary.meta.json").read_text())["unit_macs"] == "128 x 128 x 64"
    assert sorted(p.name for p in out.glob("*.csv.gz")) == ["256x128x64_cublas.csv.gz", "256x128x64_ours.csv.gz"]
    assert not list(out.glob("*.ncu-rep"))
    printed = capsys.readouterr().out
    assert "IMAD" in printed and "total" in printed
    runs = calls(tmp_path)
    assert len(runs) == 4  # per kernel: a profiled run, an export
    for profiled, export in (runs[0:2], runs[2:4]):
        assert "--section SourceCounters" in profiled and "--nvtx --nvtx-include profile/" in profiled
        assert "--launch-count 1" in profiled and "--shape 256 128 64 128x256x64/row8" in profiled
        assert "--page source --csv --print-source sass" in export
    assert "--launch ours" in runs[0] and "--launch cublas" in runs[2]
