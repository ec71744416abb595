"""CPU checks of scripts/profile/probe_late_tuning.py (refusing a bad shape index) and of the
nvidia-smi reader it shares (fo_lib.experiments.gpu_clocks)."""
import pytest
from script_loader import load_script

from fo_lib.experiments.gpu_clocks import parse_smi


def _probe():
    return load_script("scripts/profile/probe_late_tuning.py")


def test_reads_one_nvidia_smi_line_and_refuses_another_layout():
    got = parse_smi("1980, 3201, 612.45, 47, 0x0000000000000004")
    assert got == dict(sm_mhz="1980", mem_mhz="3201", power_w="612.45", temp_c="47", throttle="0x0000000000000004")
    with pytest.raises(ValueError, match="expected 5 fields"):
        parse_smi("1980, 3201")


def test_a_shape_index_out_of_range_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit):
        _probe().main(["--shape", "30"])
    assert "--shape: an index below 30" in capsys.readouterr().err


def test_a_negative_idle_other_than_minus_one_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit):
        _probe().main(["--shape", "26", "--settle", "0", "-0.5"])
    assert "--settle: seconds >= 0, or -1" in capsys.readouterr().err
