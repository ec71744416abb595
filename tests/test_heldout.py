"""The held-out predictor check on the CPU: the seeded shape draw (reproducible, in range, never a
known shape, few enough waves) and the summary's arithmetic on measured candidates."""
import pandas as pd
import pytest

from fo_lib.experiments import heldout


def waves(M, N, K):  # a stand-in wave count: 128 x 256 tiles on 132 CTAs
    return -(-((M // 128) * -(-N // 256)) // 132)


def test_the_draw_is_seeded_in_range_and_new():
    a = heldout.draw_shapes(7, 8, waves)
    assert a == heldout.draw_shapes(7, 8, waves) and a != heldout.draw_shapes(8, 8, waves)
    assert len(set(a)) == 8
    for M, N, K in a:
        assert all(heldout.LOW <= x <= heldout.HIGH and x % heldout.STEP == 0 for x in (M, N, K))
        assert heldout.MIN_WAVES <= waves(M, N, K) <= heldout.MAX_WAVES
        assert (M, N, K) not in heldout.known_shapes()


def test_known_shapes_are_never_drawn(monkeypatch):
    only = (4096, 4096, 4096)
    monkeypatch.setattr(heldout, "STEP", 1)
    monkeypatch.setattr(heldout, "LOW", 4096)
    monkeypatch.setattr(heldout, "HIGH", 4096)
    monkeypatch.setattr(heldout, "known_shapes", lambda: {only})
    with pytest.raises(ValueError, match="only 0 of 1"):
        heldout.draw_shapes(0, 1, waves, tries=50)


def test_the_summary_reads_error_and_choice_per_shape():
    rows = [("all_reduce", 2048, "[1, 1]", 1.00, 1.10), ("all_reduce", 2048, "[2]", 1.20, 1.00),
            ("all_reduce", 4096, "[1, 1]", 2.00, 2.00), ("all_reduce", 4096, "[2]", 2.20, 2.20)]
    cands = pd.DataFrame([dict(primitive=p, M=M, N=1024, K=1024, partition=part, measured_ms=meas, model_ms=model)
                          for p, M, part, meas, model in rows])
    per_shape, overall = heldout.summarize(cands)
    first = per_shape.iloc[0]
    assert first.chosen == "[2]" and first.best == "[1, 1]"  # the model ranked them the wrong way round
    assert first.best_over_chosen == pytest.approx(1.0 / 1.2)
    assert first.mean_abs_error == pytest.approx((0.10 + 0.2 / 1.2) / 2)
    assert per_shape.iloc[1].best_over_chosen == 1.0 and per_shape.iloc[1].mean_abs_error == 0.0
    assert overall["shapes"] == 2 and overall["share_at_least"] == 0.5
    assert overall["best_over_chosen_worst"] == pytest.approx(1 / 1.2)
    assert "held-out shapes: 2" in heldout.overall_line(overall)
