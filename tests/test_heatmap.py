"""Fig. 13 (fo_lib.experiments.heatmap) without a GPU: the shape grid, the paper's bound in both
regimes on hand-computed cases, the reduction of the sweep's rows to cells, the summary beside the
paper's statement, and the figure drawn from synthetic frames (or the no-data figure)."""
import json

import matplotlib
import numpy as np
import pandas as pd
import pytest

from fo_lib import experiments as ex
from fo_lib.experiments import figure_checks
from fo_lib.experiments import heatmap as hm
from fo_lib.gemm import sm90
from fo_lib.profiles import BandwidthCurve, GemmProfile

matplotlib.use("Agg")  # headless: plot() imports pyplot only when it draws


def test_bound_is_gemm_plus_last_group_when_compute_dominates():
    # compute side 4 + 1.0 = 5.0; comm side 1 + (0.5 + 0.5 + 1.0) = 3.0
    assert hm.theoretical_bound(4.0, 1.0, [0.5, 0.5, 1.0]) == (5.0, "compute")


def test_bound_is_first_wave_plus_all_communication_when_communication_dominates():
    # compute side 1 + 2 = 3; comm side 0.25 + (1 + 1 + 2) = 4.25
    assert hm.theoretical_bound(1.0, 0.25, [1.0, 1.0, 2.0]) == (4.25, "comm")


def test_bound_of_one_group_is_the_sequential_time():
    assert hm.theoretical_bound(2.0, 0.5, [3.0]) == (5.0, "compute")


@pytest.mark.parametrize("args", [(0.0, 0.1, [1.0]), (1.0, 2.0, [1.0]), (1.0, 0.5, []), (1.0, 0.5, [-1.0])])
def test_bound_rejects_impossible_inputs(args):
    with pytest.raises(ValueError):
        hm.theoretical_bound(*args)


def test_shape_grid_reaches_small_m_with_n_fixed():
    quick, full = hm.shape_grid(True), hm.shape_grid(False)
    assert len(quick) == 15 and len(full) == 24
    assert {n for _, n, _ in full} == {8192} and min(m for m, _, _ in full) == 256
    assert set(quick) <= set(full)
    assert sorted({k for *_, k in full}) == [1024, 2048, 4096, 8192]


def test_the_smallest_m_leave_one_wave_on_an_h200(monkeypatch):
    monkeypatch.setenv("FO_SM90_TILES", "guess")  # the table-free pick, even on a GPU with a tile table
    # 132 SMs, 4 left to the link: 128 tiles per wave; M = 256 and 512 fill at most one wave, so the
    # heat map's bottom rows have nothing to overlap (marked as fallbacks, not dropped).
    waves = {m: sm90.default_config(m, 8192, k, 132).grid(m, 8192, 128).num_waves for m, _, k in hm.shape_grid()}
    assert waves[256] == waves[512] == 1 and waves[1024] == 2 and waves[8192] == 16


def test_group_bytes_cover_the_waves():
    assert hm.group_bytes([10, 20, 30, 40], "[1, 3]") == [10, 90]
    with pytest.raises(ValueError):
        hm.group_bytes([10, 20], (1, 2))


def _sweep(overlaps=(True, False)):
    """Two cells of a sweep as the overlap sweep returns them, with saved profiles and a curve."""
    curve = BandwidthCurve(((1e6, 0.02), (1e8, 1.01), (1e9, 10.01)), primitive="all_reduce", link="emulated")
    rows, profiles = [], []
    for (M, K), ov in zip(((2048, 4096), (4096, 8192)), overlaps):
        T = M // 512
        prof = GemmProfile.synthetic(T, 0.25, 100_000_000, M=M, N=8192, K=K)
        profiles.append(prof.to_dict() | {"primitive": "all_reduce"})
        rows.append(dict(primitive="all_reduce", M=M, N=8192, K=K, world=2, link="emulated (loopback, copy engine)",
                         waves=T, config="m128n256k64_s3", gemm_ms=0.25 * T, cublas_ms=0.24 * T, comm_ms=1.0 * T,
                         cublas_then_comm_ms=1.3 * T, predicted_partition=str([1] * T), overlap_predicted_ms=1.1 * T,
                         best_partition=str([1] * T), best_ms=1.05 * T, tuner_overlaps=ov, check_overlap_ms=1.1 * T,
                         check_reference_ms=1.3 * T, model_params="{}"))
    return pd.DataFrame(rows), {"profiles": profiles, "curves": {"all_reduce": curve.to_dict()}}


def test_cells_compute_speedup_bound_and_fallback_by_hand():
    summary, saved = _sweep()
    cells = hm.cell_rows(summary, saved)
    a, b = cells.iloc[0], cells.iloc[1]
    # Cell a: 4 groups of 1e8 bytes (a sample of the curve: 1.01 ms each); GEMM = cuBLAS 0.96 ms
    assert json.loads(a.group_comm_ms) == pytest.approx([1.01] * 4)
    assert a.bound_gemm_ms == pytest.approx(0.96) and a.bound_regime == "comm"
    assert a.bound_ms == pytest.approx(0.25 + 4 * 1.01)
    assert a.tuned_call_ms == pytest.approx(4.4) and a.speedup == pytest.approx(5.2 / 4.4)
    assert a.bound_ratio == pytest.approx((0.25 + 4.04) / 4.4)
    # Cell b: the tuner falls back, so the tuned call is cuBLAS then the collective: speedup 1
    assert not b.tuner_overlaps and b.tuned_call_ms == b.cublas_then_comm_ms and b.speedup == 1.0
    assert b.overlap_speedup == pytest.approx(1.3 / 1.1)
    assert b.MN == 4096 * 8192


def test_summary_puts_the_paper_beside_ours():
    summary, saved = _sweep(overlaps=(True, True))
    s = hm.summary(hm.cell_rows(summary, saved))
    assert list(s.index) == [f"paper ({hm.PAPER['setting']})", "ours: all_reduce (emulated link)"]
    assert "80%" in s.iloc[0]["bound ratio"] and s.iloc[1]["bound ratio"].startswith("median ")
    assert s.iloc[1]["cells >= 2 waves"] == 2 and s.iloc[1]["tuner falls back"] == 0


def test_plot_marks_fallback_cells_and_saves(tmp_path):
    summary, saved = _sweep()
    cells = hm.cell_rows(summary, saved)
    fig = hm.plot(cells, {"gpu": "synthetic", "link": "emulated", "world_size": 2})
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 2
    texts = [t.get_text() for t in panels[0].texts]
    assert sum("fallback" in t for t in texts) == 1 and len(texts) == 2
    assert any("emulated link" in t.get_text() for t in fig.texts)
    paths = ex.save(fig, "heatmap_test", tmp_path)
    assert all(p.stat().st_size > 1000 for p in paths)


def test_another_gpus_grid_is_drawn_below_on_the_same_scales_and_summarised_by_name():
    summary, saved = _sweep(overlaps=(True, True))
    h200 = hm.cell_rows(summary, saved)
    h100 = h200.assign(speedup=h200.speedup * 0.5, bound_ratio=h200.bound_ratio * 0.5)
    metas = ({"gpu": "NVIDIA H200", "world_size": 2}, {"gpu": "NVIDIA H100 80GB HBM3"})
    fig = hm.plot(h200, metas[0], [(h100, metas[1]), (None, {})])
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 4
    assert " on H200:\n" in panels[0].get_title() and " on H100 80GB HBM3:\n" in panels[2].get_title()
    # One colour scale for both GPUs: the H100's slower cells are not stretched to the H200's colours.
    assert panels[0].images[0].get_clim() == panels[2].images[0].get_clim()
    assert panels[0].images[0].get_clim()[0] <= float(h100.speedup.min())
    figure_checks.check(fig)
    s = hm.summary(h200, metas[0], [(h100, metas[1])])
    assert [i for i in s.index if i.startswith("ours")] == [
        "ours: all_reduce on H200 (emulated link)", "ours: all_reduce on H100 80GB HBM3 (emulated link)"]
    assert hm.summary(h200, metas[0]).index[-1] == "ours: all_reduce (emulated link)"


def test_replay_without_a_record_draws_the_no_data_figure(tmp_path, capsys):
    df, meta = hm.load("no-such-data-set")
    assert df is None and meta == {}
    assert "run mode='measure' on a GPU" in capsys.readouterr().out
    fig = hm.plot(df, meta)
    assert any("no recorded data yet" in t.get_text() for ax in fig.axes for t in ax.texts)
    assert any("emulated link" in t.get_text() for t in fig.texts)
    assert all(p.stat().st_size > 1000 for p in ex.save(fig, "heatmap_none", tmp_path))


def test_bound_ratio_stays_finite_on_the_synthetic_grid():
    summary, saved = _sweep()
    cells = hm.cell_rows(summary, saved)
    assert np.isfinite(cells[["speedup", "bound_ratio", "bound_speedup"]].to_numpy()).all()
