"""Fig. 15's numbers (fo_lib.experiments.prediction_error) on small synthetic frames and on the
recorded sweeps."""
import json

import numpy as np
import pandas as pd
import pytest

from fo_lib import experiments as ex
from fo_lib.experiments import prediction_error as pe


def _frame(rows):
    """Candidates as the loader returns them: (primitive, M, part, model, eager, graph)."""
    df = pd.DataFrame([dict(primitive=p, M=m, N=8, K=8, nccl_max_ctas=0, partition=str(list(part)), part=part,
                            model_ms=mod, measured_ms=eag, measured_graph_ms=gra)
                       for p, m, part, mod, eag, gra in rows])
    df["shape"] = df.M.astype(str) + "x8x8"
    df["waves"] = df.part.map(sum)
    return df


SYNTH = _frame([
    ("all_reduce", 1, (2,), 2.0, 1.0, 2.0),      # eager error 100%, graph 0%
    ("all_reduce", 1, (1, 1), 1.0, 1.5, 1.25),   # the model's first; eager 33.3%, graph 20%
    ("all_reduce", 2, (3,), 1.0, 0.8, 1.0),      # eager 25%, graph 0%
    ("all_reduce", 2, (1, 2), 1.2, 1.0, np.nan),  # measured eager only
])


def test_relative_error_divides_by_the_measured_time_of_the_chosen_column():
    eager = pe.relative_errors(SYNTH, "measured_ms")
    assert np.allclose(eager, [1.0, 0.5 / 1.5, 0.25, 0.2 / 1.0])
    graph = pe.relative_errors(SYNTH, "measured_graph_ms")
    assert len(graph) == 3 and np.allclose(graph, [0.0, 0.2, 0.0])
    # Dividing by the prediction instead would give 0.5 for the first candidate, not 1.0.
    assert eager.iloc[0] != abs(2.0 - 1.0) / 2.0


def test_cdf_is_sorted_monotone_and_ends_at_one():
    x, y = pe.cdf([0.3, 0.1, 0.2, 0.1])
    assert list(x) == [0.1, 0.1, 0.2, 0.3] and list(y) == [0.25, 0.5, 0.75, 1.0]
    x, y = pe.cdf([])
    assert len(x) == len(y) == 0


def test_chosen_is_the_models_first_unless_the_summary_records_the_tuners_pick():
    per = pe.chosen_vs_best(SYNTH, None, "measured_ms").set_index("shape")
    # Case 1: the model ranks (1, 1) first (1.0 ms), measured 1.5 against the best 1.0.
    assert per.loc["1x8x8", "chosen"] == "[1, 1]" and per.loc["1x8x8", "chosen_of_best"] == pytest.approx(1 / 1.5)
    assert (per.chosen_by == "model").all()
    summary = pd.DataFrame([dict(primitive="all_reduce", M=1, N=8, K=8, nccl_max_ctas=0, predicted_partition="[2]")])
    per = pe.chosen_vs_best(SYNTH, summary, "measured_ms").set_index("shape")
    assert per.loc["1x8x8", "chosen"] == "[2]" and per.loc["1x8x8", "chosen_by"] == "tuner"
    assert per.loc["1x8x8", "chosen_of_best"] == pytest.approx(1.0)
    assert per.loc["2x8x8", "chosen_by"] == "model"  # no pick recorded for this case


def test_accuracy_reports_the_mean_over_every_candidate_not_over_cases():
    # Cases of unequal size (3 and 2 candidates): the two means differ.
    df = pd.concat([SYNTH, _frame([("all_reduce", 1, (1, 1, 1), 1.0, 1.0, 1.0)])], ignore_index=True)
    row = pe.accuracy(df, None, "measured_ms")
    errs = [1.0, 0.5 / 1.5, 0.25, 0.2, 0.0]
    assert row["candidates"] == 5 and row["cases"] == 2
    assert row["mean_error"] == pytest.approx(np.mean(errs))
    per_case = np.mean([np.mean([1.0, 0.5 / 1.5, 0.0]), np.mean([0.25, 0.2])])
    assert row["mean_error"] != pytest.approx(per_case)
    assert row["measured_above_model"] == pytest.approx(0.2)


def test_copy_engine_cases_get_their_own_label():
    df = pd.concat([SYNTH.assign(copy_engine=False), SYNTH.assign(copy_engine=True)], ignore_index=True)
    labelled = pe.case_labels(df)
    assert labelled.groupby(["primitive", "shape"]).ngroups == 4
    assert pe.case_labels(SYNTH.assign(copy_engine=False))["shape"].equals(SYNTH["shape"])


@pytest.mark.skipif(ex.have_gpu(), reason="checks the error a machine without a GPU gives")
def test_measure_without_a_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        pe.run("measure", "h200", quick=True)


def test_replay_compares_the_recorded_one_gpu_sweeps_of_each_gpu_then_the_two_gpu_sweep():
    assert pe.run("replay", "h200") == ["h200", "h100", "h200x2"]
    assert pe.run("replay", "h100") == ["h100", "h200", "h200x2"]
    counts = {ds: len(pe.recorded(ds)[0]) for ds in ("h200", "h100", "h200x2")}
    assert counts == {"h200": 192, "h100": 96, "h200x2": 644}
    # The H100 sweep is the one calibrate ran before fitting: its model error is the defaults'.
    labels = {ds: pe.label(pe.recorded(ds)[2], pe.recorded(ds)[1]) for ds in ("h200", "h100")}
    assert labels["h100"].endswith("default model constants") and "default" not in labels["h200"]
    assert pe.uncalibrated(None) is False
    assert pe.uncalibrated(pd.DataFrame({"model_params": [None, None]})) is False  # unknown, not default
    assert pe.uncalibrated(pd.DataFrame({"model_params": ['{"launch_ms": 0.01}']})) is True


def test_other_gpus_are_full_one_gpu_sets_recorded_on_another_gpu(tmp_path, monkeypatch):
    from fo_lib.experiments import common

    def put(folder, gpu):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "rec.csv").write_text("a\n1\n")
        (tmp_path / folder / "rec.meta.json").write_text(json.dumps({"gpu": gpu}))

    put("h200", "NVIDIA H200")
    put("h100", "NVIDIA H100 80GB HBM3")
    put("h100-quick", "NVIDIA H100 80GB HBM3")  # small grids: not drawn beside a figure
    put("h100x2", "NVIDIA H100 80GB HBM3")   # several GPUs: not a one-GPU record
    put("h200b", "NVIDIA H200")              # the shown GPU under another name
    put("h100b", "NVIDIA H100 80GB HBM3")    # a second record of the H100: one set per GPU
    (tmp_path / "a100").mkdir()              # no such record
    monkeypatch.setattr(common, "DATA_DIR", tmp_path)
    shown = {"gpu": "NVIDIA H200"}
    assert common.other_gpus("rec", shown) == ["h100"]
    assert common.other_gpus("rec", {"gpu": "NVIDIA H100 80GB HBM3"}) == ["h200"]
    assert common.other_gpus("missing", shown) == []
    assert common.other_gpus("rec", {}) == []  # a record that names no GPU: nothing to set beside it
    (tmp_path / "h100" / "rec.csv").unlink()  # a sidecar without its record
    assert common.other_gpus("rec", shown) == ["h100b"]
    (df, meta), = common.other_records("rec", shown)  # the same sets, loaded
    assert meta == {"gpu": "NVIDIA H100 80GB HBM3"} and df.a.tolist() == [1]
    assert common.gpu_name({"gpu": "NVIDIA H100 80GB HBM3"}) == "H100 80GB HBM3"


@pytest.mark.parametrize("data_set", ["h200", "h200x2"])
def test_recorded_cdf_is_monotone_and_its_mean_depends_on_the_timing(data_set):
    df, summary, meta = pe.recorded(data_set)
    means = {}
    for measured in pe.TIMINGS:
        err = pe.relative_errors(df, measured)
        x, y = pe.cdf(err)
        assert len(x) == len(df) and np.all(np.diff(x) >= 0) and np.all(np.diff(y) > 0) and y[-1] == 1.0
        means[measured] = err.mean()
    assert abs(means["measured_ms"] - means["measured_graph_ms"]) > 0.001
    assert 0 < min(means.values()) < 0.2


def test_recorded_picks_are_the_tuners_and_match_the_sweeps_own_ratio():
    df, summary, _ = pe.recorded("h200x2")
    per = pe.chosen_vs_best(df, summary, "measured_graph_ms")
    assert len(per) == 83 and (per.chosen_by == "tuner").all()
    assert (per.chosen_of_best <= 1 + 1e-12).all()
    # The sweep recorded predicted / best per case: the same ratio, inverted.
    assert per.chosen_of_best.mean() == pytest.approx((1 / summary.predicted_vs_best_graph).mean())


def test_table_has_the_papers_rows_and_ours_per_timing():
    t = pe.table(["h200", "h200x2"])
    assert list(t.data[:2]) == list(pe.PAPER.data) and len(t) == 6
    ours = t[t.data.str.startswith("ours")]
    assert set(ours.timing) == {"eager", "CUDA graph"} and (ours.chosen_of_best_mean <= 1).all()
    shown = pe.side_by_side(t)
    assert shown.loc[0, "mean error"] == "3.41%" and shown.loc[0, "chosen / best (mean)"] == "> 99%"
