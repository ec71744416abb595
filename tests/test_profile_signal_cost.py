"""fo_lib.reports.ncu's reading of Nsight Compute's raw-page CSV (what
scripts/profile/profile_signal_cost.py runs on the GPU's output), on a synthetic output (no GPU)."""
import pytest

from fo_lib.reports import ncu


HEADER = '"ID","Process ID","Kernel Name","gpu__time_duration.sum","smsp__inst_executed.sum"'


def ncu_output(rows, unit="ns"):
    """ncu's stdout: its own lines around the table, a units row, then one row per launch."""
    lines = ["==PROF== Connected to process 1 (python3)", HEADER, f'"","","","{unit}","inst"']
    for i, (kernel, t, inst) in enumerate(rows):
        lines.append(f'"{i}","1","{kernel}","{t}","{inst}"')
        if i == 0:
            lines.append("==PROF== Profiling \"fo_gemm_nt\": 0%....50%....100%")
    lines.append("==PROF== Disconnected from process 1")
    return "\n".join(lines) + "\n"


def kernel(epilogue):
    return f"fo_gemm_nt_m256n128k64_w4x2_s3_bf16_{epilogue}"


def test_rows_follow_the_labels_with_units_and_separators():
    labels = [(64, 64, 64, "plain"), (64, 64, 64, "signal_tiles_4g")]
    out = ncu.parse_ncu_csv(ncu_output([(kernel("plain"), "110,240", "266,395,616"),
                                        (kernel("signal_store"), "120,000", "268,381,712")]), labels)
    assert out.variant.tolist() == ["plain", "signal_tiles_4g"]
    assert out.ms.tolist() == pytest.approx([0.11024, 0.12])
    assert out.instructions.tolist() == [266395616, 268381712]
    us = ncu.parse_ncu_csv(ncu_output([(kernel("plain"), "1,517.3", "1")], unit="usecond"), labels[:1])
    assert us.ms.tolist() == pytest.approx([1.5173])


@pytest.mark.parametrize("rows,labels,match", [
    ([(kernel("plain"), "1", "1")], [(1, 1, 1, "scatter")], "launch order mismatch"),
    ([(kernel("plain"), "1", "1")], [(1, 1, 1, "plain")] * 2, "profiled 1 launches, expected 2"),
])
def test_mismatches_are_refused(rows, labels, match):
    with pytest.raises(ValueError, match=match):
        ncu.parse_ncu_csv(ncu_output(rows), labels)


def test_unknown_unit_and_missing_table_are_refused():
    with pytest.raises(ValueError, match="unknown duration unit"):
        ncu.parse_ncu_csv(ncu_output([(kernel("plain"), "1", "1")], unit="cycle"), [(1, 1, 1, "plain")])
    with pytest.raises(ValueError, match="no CSV"):
        ncu.parse_ncu_csv("==PROF== ERROR: no kernels were profiled\n", [])


def test_every_variant_names_a_kernel_epilogue():
    from fo_lib import gemm

    assert set(ncu.KERNEL_OF.values()) <= set(gemm.PORTABLE_KERNELS)


def test_ncu_numbers_read_separators_and_blank_cells():
    assert ncu.ncu_number("1,517.3") == pytest.approx(1517.3)
    assert ncu.ncu_number("", blank=0.0) == 0.0 and ncu.ncu_number("nan", blank=0.0) == 0.0
    with pytest.raises(ValueError):
        ncu.ncu_number("")
