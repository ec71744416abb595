"""The partition space of one shape (fo_lib.experiments.explorer.space) on the CPU, measurements faked:
the rank correlation, the choice against the best, and the scatter with both marked."""
import numpy as np
import pandas as pd
import pytest

from fo_lib.experiments.explorer import space


def _cands(model, measured):
    parts = [str([1] * (i + 1)) for i in range(len(model))]
    return pd.DataFrame(dict(partition=parts, model_ms=model, measured_ms=measured))


def test_spearman_matches_its_definition():
    assert space.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert space.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties share their average rank: ranks (0.5, 0.5, 2, 3) against (0, 1, 2, 3)
    want = np.corrcoef([0.5, 0.5, 2, 3], [0, 1, 2, 3])[0, 1]
    assert space.spearman([1, 1, 2, 3], [5, 6, 7, 8]) == pytest.approx(want)
    assert np.isnan(space.spearman([1, 1, 1], [1, 2, 3]))


def test_the_summary_names_the_choice_and_the_best():
    s = space.summarize(_cands([1.0, 1.1, 1.2], [1.3, 1.2, 1.25]))
    assert s["chosen"] == "[1]" and s["best"] == "[1, 1]"
    assert s["chosen_over_best"] == pytest.approx(1.3 / 1.2) and s["partitions"] == 3
    assert s["mean_abs_error"] == pytest.approx(np.mean([0.3 / 1.3, 0.1 / 1.2, 0.05 / 1.25]))


def test_the_scatter_marks_both_and_says_the_numbers():
    fig = space.draw_space(_cands([1.0, 1.1, 1.2], [1.3, 1.2, 1.25]))
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert any(lab.startswith("the model's choice [1]") for lab in labels)
    assert any(lab.startswith("the best measured [1, 1]") for lab in labels)
    assert ax.get_xlabel() and ax.get_ylabel()
    assert any("rank correlation" in t.get_text() and "1.083" in t.get_text() for t in ax.texts)
