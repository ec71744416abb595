"""fo_lib.reports.sass: the SASS parsing of scripts/profile/sass_report.py, on a small synthetic
listing (no nvdisasm needed)."""
from fo_lib.reports import sass

SASS = """\
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_7:
        /*0010*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0020*/                   LDSM.16.M88.4 R8, [R2] ;
        /*0030*/               @P1 BRA `(.L_x_5) ;
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
.L_x_5:
        /*0050*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0060*/               @P1 BRA `(.L_x_6) ;
        /*0070*/                   IMAD R3, R3, 0x2, RZ ;
        /*0080*/               @P2 BRA `(.L_x_6) ;
        /*0090*/                   IABS R5, R3 ;
        /*00a0*/                   I2F.RP R6, R5 ;
        /*00b0*/                   MUFU.RCP R6, R6 ;
.L_x_6:
        /*00c0*/                   IADD3 R0, R0, 0x1, RZ ;
        /*00d0*/              @!P0 BRA `(.L_x_7) ;
        /*00e0*/                   EXIT ;
"""


def test_k_loop_and_hot_path():
    loop = sass.k_loop(SASS)
    assert loop[0] == ".L_x_7:" and "BRA `(.L_x_7)" in loop[-1]
    hot = sass.hot_path(loop)
    # The once-per-tile block (from the first branch to .L_x_6 up to it) is left out.
    assert hot["HMMA"] == 2 and hot["LDSM"] == 1 and hot["BAR"] == 1 and hot["IADD3"] == 1
    assert hot["IMAD"] == 0 and hot["MUFU"] == 0 and hot["IABS"] == 0
    assert sum(hot.values()) == 8  # HMMA LDSM BRA BAR HMMA BRA IADD3 BRA


def test_no_mma_loop_is_an_error():
    import pytest
    with pytest.raises(ValueError, match="no loop"):
        sass.k_loop(".L_x_1:\n        /*0000*/                   IADD3 R0, R0, 0x1, RZ ;\n"
                           "        /*0010*/              @!P0 BRA `(.L_x_1) ;\n")


def test_hot_sequence_keeps_modifiers_and_similarity_sees_order():
    seq = sass.hot_sequence(sass.k_loop(SASS))
    assert seq[:3] == ["HMMA.16816.F32.BF16", "LDSM.16.M88.4", "BRA"]
    assert "BAR.SYNC.DEFER_BLOCKING" in seq and "MUFU.RCP" not in seq
    assert sass.similarity(seq, list(seq)) == 1.0
    # The same instructions in another order are less alike; a modifier alone tells two apart.
    moved = seq[1:] + seq[:1]
    assert 0 < sass.similarity(seq, moved) < 1
    assert sass.similarity(["IADD3"], ["IADD3.X"]) == 0.0


HOPPER = """\
.L_x_3:
        /*0000*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x30000], R2 ;
        /*0010*/                   R2UR UR8, R6 ;
        /*0020*/                   HGMMA.64x176x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
        /*0030*/                   UIADD3 UR8, UR8, 0x2, URZ ;
        /*0040*/                   HGMMA.64x176x16.F32.BF16 R24, gdesc[UR8], R24 ;
        /*0050*/              @!P1 BRA `(.L_x_3) ;
.L_x_4:
        /*0060*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0070*/              @!P2 BRA `(.L_x_4) ;
"""


def test_the_hopper_k_loop_is_found_by_its_hgmma():
    """``mma="HGMMA"``: the consumers' loop (an HMMA loop elsewhere is not it), with its R2UR."""
    loop = sass.k_loop(HOPPER, mma="HGMMA")
    assert loop[0] == ".L_x_3:" and sass.instruction_count(loop) == 6
    ops = sass.opcodes(loop)
    assert (ops["HGMMA"], ops["R2UR"], ops["UIADD3"], ops["SYNCS"]) == (2, 1, 1, 1) and sum(ops.values()) == 6
    assert sass.k_loop(HOPPER)[0] == ".L_x_4:"  # the default still looks for HMMA


def test_the_script_reports_hopper_configs_and_refuses_unknown_names(capsys, monkeypatch, nvrtc):
    """``--sm90`` compiles through NVRTC (here without nvdisasm: registers only) and refuses, in one
    line and exit status 2, a config or an epilogue the Hopper kernel does not have."""
    import pytest

    from script_loader import load_script
    rep = load_script("scripts/profile/sass_report.py")
    monkeypatch.setattr(rep, "find_nvdisasm", lambda given: None)
    assert rep.main(["--sm90", "128x176x64pd", "--epilogues", "signal"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "no nvdisasm: registers only" in out[0]
    assert out[2].split()[:4] == ["128x176x64pd", "signal", "168", "0"]
    assert rep.main(["--sm90", "128x999x64"]) == 2
    assert "not an sm90 config: 128x999x64" in capsys.readouterr().err
    assert rep.main(["--sm90", "--epilogues", "signal_store"]) == 2
    assert "not an sm90 epilogue: signal_store" in capsys.readouterr().err
    assert rep.main(["--epilogues", "nope"]) == 2
    assert "not a portable kernel: nope" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rep.main(["--config", "nope"])
