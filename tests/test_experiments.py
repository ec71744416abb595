"""CPU logic of fo_lib.experiments: mode resolution, candidate selection, the summaries the notebooks
print (on the recorded H200 data, which the repository ships)."""
import numpy as np
import pytest

from fo_lib import experiments as ex
from fo_lib import partition as P
from fo_lib.experiments import overlap


def test_resolve_mode():
    assert ex.resolve_mode("replay") == "replay"
    assert ex.resolve_mode("auto", needs_gpu=False) == "measure"
    with pytest.raises(ValueError, match="mode must be"):
        ex.resolve_mode("fast")
    if not ex.have_gpu():
        assert ex.resolve_mode("auto") == "replay"
        with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
            ex.resolve_mode("measure")


def test_candidate_partitions():
    rng = np.random.default_rng(0)
    assert overlap.candidate_partitions(4, (1, 3), rng, 16) == list(P.compositions(4))
    many = overlap.candidate_partitions(16, (2, 14), rng, 12)
    assert len(many) == 12 and len(set(many)) == 12
    assert {(2, 14), P.finest(16), P.no_overlap(16)} <= set(many)
    assert all(sum(c) == 16 for c in many)


def test_recorded_summaries():
    df, meta = overlap.candidates("h200")
    assert meta["gpu"] == "NVIDIA H200"
    stat = overlap.finest_statistic(df)
    acc = overlap.predictor_accuracy(df)
    assert len(stat) == len(acc) == df.groupby(["primitive", "shape"]).ngroups
    assert (acc.chosen_of_best <= 1.0 + 1e-12).all() and (acc.mean_error >= 0).all()
    assert (stat.finest_loss >= -1e-9).all()


def test_overheads_summary_has_paper_and_ours():
    s = ex.overheads.summary("h200")
    assert len(s) == 3 and s.gpu.str.contains("ours").any()


def test_missing_record_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="measure mode"):
        ex.load("h200", "no_such_experiment")
