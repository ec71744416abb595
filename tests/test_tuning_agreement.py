"""CPU checks of fo_lib.experiments.tuning_agreement: the candidates it times and its summary."""
from pathlib import Path

import pandas as pd
import pytest

from fo_lib.experiments import tuning_agreement as ta
from fo_lib.gemm import config_tuning, sm90

TABLE = Path(__file__).resolve().parents[1] / "data" / "h200" / "gemm_sm90_tiles.csv"


def test_candidates_are_the_tuning_shortlist(monkeypatch):
    monkeypatch.setenv("FO_SM90_TILES", str(TABLE))
    shortlist, model = ta.candidates(2048, 4096, 7168, 132)
    assert model in shortlist and not any(c.direct_c and not c.pingpong for c in shortlist)
    assert len(shortlist) >= config_tuning.TOP
    monkeypatch.setenv("FO_SM90_TILES", "guess")
    with pytest.raises(sm90.GemmError, match="no tile table"):
        ta.candidates(2048, 4096, 7168, 132)


def _rows(shape, entries):
    """The first entry is the model's pick."""
    return [dict(M=shape[0], N=shape[1], K=shape[2], config=c, model=j == 0, tune_ms=i, graph_ms=g)
            for j, (c, i, g) in enumerate(entries)]


def test_a_pingpong_direct_config_is_weighed_as_the_shortlist():
    """The table's own pick may be a ping-pong direct-C config (128x168x64pd on 2600 x 4096 x 14336):
    the summary takes it as the model's pick."""
    df = pd.DataFrame(_rows((2600, 4096, 14336), [("168pd", 1.00, 1.00), ("256", 1.05, 1.02)]))
    s = ta.summary(df).iloc[0]
    assert (s.tune_pick, s.graph_pick, s.pick_loss) == ("168pd", "168pd", 1.0)


def test_the_shortlist_may_hold_a_pingpong_direct_config(monkeypatch):
    """With the committed table, autotuning's shortlist holds a ping-pong direct-C config where the
    table picks one."""
    monkeypatch.setenv("FO_SM90_TILES", str(TABLE))
    shortlist, _ = ta.candidates(2600, 4096, 14336, 132)
    assert any(c.direct_c and c.pingpong for c in shortlist)  # the table's pick there: 128x168x64pd


def test_summary_says_what_the_tuned_pick_costs_in_the_benchmark_regime():
    df = pd.DataFrame(_rows((1, 2, 3), [("a", 1.00, 1.10), ("b", 1.05, 1.00)])
                      + _rows((4, 5, 6), [("a", 1.00, 1.00), ("b", 1.10, 1.05)])
                      + _rows((7, 8, 9), [("c", 2.0, 2.0)])
                      # tuning: b faster than the model's a, but by less than config_tuning.WIN: a stays
                      + _rows((1, 1, 1), [("a", 1.000, 1.0), ("b", 0.998, 1.1)]))
    s = ta.summary(df).set_index(["M", "N", "K"])
    # the regimes disagree: tuning takes a
    assert s.loc[(1, 2, 3), ["tune_pick", "graph_pick"]].tolist() == ["a", "b"]
    assert s.loc[(1, 2, 3), "pick_loss"] == pytest.approx(1.10)
    # they agree
    assert s.loc[(4, 5, 6), "pick_loss"] == 1.0 and s.loc[(7, 8, 9), "pick_loss"] == 1.0
    assert s.loc[(1, 1, 1), ["tune_pick", "pick_loss"]].tolist() == ["a", 1.0]


def test_summary_weighs_the_tunings_as_autotuning_does():
    """Rows that record a handicap (a single CTA on one wave) are weighed by it: a single CTA 1 %
    ahead of the cluster is not autotuning's pick, 5 % ahead it is; rows without the column: none."""
    h = 1 + config_tuning.ONE_WAVE_SINGLE_CTA
    for lead, want in ((0.01, "c2"), (0.05, "single")):
        rows = _rows((1, 1, 1), [("single", 1.0 - lead, 1.1), ("c2", 1.0, 1.0)])
        rows[0]["model"], rows[1]["model"] = False, True
        for r in rows:
            r["handicap"] = h if r["config"] == "single" else 1.0
        assert ta.summary(pd.DataFrame(rows)).iloc[0].tune_pick == want
        for r in rows:
            del r["handicap"]
        assert ta.summary(pd.DataFrame(rows)).iloc[0].tune_pick == "single"
