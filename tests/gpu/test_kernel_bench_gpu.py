"""GPU smoke run of Table 5's measuring core (fo_lib.experiments.kernel_bench), the code that
scripts/bench/bench_gemm.py, bench_postops.py and notebook 06 in measure mode share: one small shape
each, few rounds, and the overhead loaders reading what it produced."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import experiments as ex  # noqa: E402
from fo_lib.experiments import common  # noqa: E402
from fo_lib.experiments import kernel_bench as kb  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


def test_gemm_benchmark_times_every_variant_and_checks_against_cublas():
    lines = []
    df, samples = kb.run_gemm([(1024, 4096, 1024)], rounds=2, inner=2, graph=True, control=True, samples=True,
                              log=lines.append)
    assert {"torch", "ours", "signal", "signal_4g", "signal_table", "signal_rows", "scatter", "ours_again"} \
        == set(df.variant)
    assert (df.median_ms > 0).all() and (df.rel_err < 2e-2).all()
    assert len(lines) == 2 and lines[1].split()[:3] == ["1024", "4096", "1024"]  # header + one table line
    assert set(samples.variant) == set(df.variant)


def test_postops_benchmark_times_rmsnorm_against_torch():
    df = kb.run_postops([(1024, 4096)], rounds=2, graph=True, log=lambda _: None)
    assert {"torch_rms", "ours_rms", "copy", "ours_gather"} == set(df.variant)
    assert (df.median_ms.astype(float) > 0).all() and float(df.max_abs_err_vs_torch.iloc[0]) < 0.1


def test_overheads_measure_records_a_data_set_the_notebook_reads(monkeypatch, tmp_path):
    monkeypatch.setattr(common, "DATA_DIR", tmp_path)
    small = {"gemm_portable": dict(shapes=[(1024, 4096, 1024)], options=dict(rounds=2, inner=2, graph=True,
                                                                              control=True), command="smoke"),
             "postops": dict(shapes=[(1024, 4096)], options=dict(rounds=2, graph=True), command="smoke")}
    monkeypatch.setattr(ex.overheads, "measure_plan", lambda quick=False: small)
    tag = ex.overheads.run("measure", quick=True)
    assert tag.endswith("-quick")
    s = ex.overheads.summary(tag)
    assert len(s) == 3 and s.gpu.str.contains("ours").any()
