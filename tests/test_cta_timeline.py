"""CPU checks of fo_lib.experiments.cta_timeline (the probe stamps cut into cadence and ends) and of
scripts/profile/probe_sm90_timeline.py's argument handling."""
import numpy as np
import pytest
from script_loader import load_script

from fo_lib.experiments.cta_timeline import summarize


def _stamps(ctas=4, units=3, cadence_ns=10_000, first_skew_ns=500, epilogue_ns=2_000, t0=1_000_000):
    """CTA c runs its units back to back every cadence_ns, starting c * first_skew_ns late."""
    rows = []
    for c in range(ctas):
        for u in range(units):
            start = t0 + c * first_skew_ns + u * cadence_ns
            rows.append((start, start + cadence_ns + epilogue_ns, 100 + c, c))
    return np.array(rows, dtype=np.int64)


def test_a_steady_grid_is_cut_into_its_cadence_skew_and_ends():
    p = _stamps()
    kernel_ms = 0.040  # 40 us: 3 units of 10 us, 1.5 us of skew, 2 us of epilogue, the rest the ends
    got = summarize(p, kernel_ms)
    assert got["units"] == 3
    assert got["cadence_us"] == pytest.approx(10.0)
    assert got["skew_us"] == pytest.approx(1.5)
    assert got["span_us"] == pytest.approx(1.5 + 30 + 2)
    assert got["ends_us"] == pytest.approx(40 - 33.5)
    assert got["steady_us"] == pytest.approx(30.0)
    assert got["overhead_us"] == pytest.approx(10.0)
    assert got["last_unit_us"] == pytest.approx(12.0)
    # The latest CTA ends 1.5 us after the first; the median of 4 CTAs' ends (0, .5, 1, 1.5 us late) is .75.
    assert got["imbalance_us"] == pytest.approx(0.75)


def test_the_cadence_is_the_median_cta_and_a_lone_unit_has_none():
    p = _stamps(ctas=3, units=2)
    p[p[:, 3] == 2, 0] += np.array([0, 20_000])  # CTA 2's second unit starts 20 us late
    p[p[:, 3] == 2, 1] += np.array([0, 20_000])
    assert summarize(p, 0.05)["cadence_us"] == pytest.approx(10.0)
    one = summarize(_stamps(ctas=2, units=1), 0.02)
    assert one["units"] == 1 and np.isnan(one["cadence_us"])


@pytest.mark.parametrize("bad, match", [
    (np.zeros((0, 4)), "tiles >= 1"), (np.zeros((3, 3)), r"\[tiles, 4\]"),
    (np.array([[5, 4, 0, 0]]), "end before its start"), (np.array([[0, 4, 0, 0]]), "unset start"),
])
def test_malformed_stamps_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        summarize(bad, 1.0)


def test_the_script_reads_shapes_and_refuses_a_bad_one_in_one_line(capsys):
    script = load_script("scripts/profile/probe_sm90_timeline.py")
    assert script.parse_shape("2048,7168,5120,128x176x64pd/row8") == (2048, 7168, 5120, "128x176x64pd/row8")
    for entry in script.DEFAULT_SHAPES:  # every default names a config the kernel runs
        from fo_lib.experiments.kernel_bench import config_variant
        from fo_lib.gemm import sm90
        M, N, K, label = script.parse_shape(entry)
        config_variant(sm90.CONFIGS, label, M)
    with pytest.raises(SystemExit):
        script.main(["--shapes", "2048,0,5120,128x256x64", "--out", "/tmp/x.csv"])
    assert "M,N,K,CONFIG with positive integers" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--probes", "0"], ["--rounds", "0"]])
def test_the_script_refuses_empty_runs_in_one_line(args, capsys):
    script = load_script("scripts/profile/probe_sm90_timeline.py")
    with pytest.raises(SystemExit):
        script.main(args + ["--out", "/tmp/x.csv"])
    assert "at least 1" in capsys.readouterr().err
