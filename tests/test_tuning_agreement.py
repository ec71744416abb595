"""CPU checks of fo_lib.experiments.tuning_agreement: the candidates it times and its summary."""
import math
from pathlib import Path

import pandas as pd
import pytest

from fo_lib.experiments import tuning_agreement as ta
from fo_lib.gemm import config_tuning, sm90

TABLE = Path(__file__).resolve().parents[1] / "data" / "h200" / "gemm_sm90_tiles.csv"


def test_candidates_are_the_tuning_shortlist_and_its_direct_c_twins(monkeypatch):
    monkeypatch.setenv("FO_SM90_TILES", str(TABLE))
    shortlist, direct, model = ta.candidates(2048, 4096, 7168, 132)
    assert model in shortlist and not any(c.direct_c and not c.pingpong for c in shortlist)
    assert len(shortlist) >= config_tuning.TOP
    assert direct and all(c.direct_c and c.stages == 4 for c in direct)
    # each twin has a shortlisted cooperative tile of its width, cluster and raster
    for d in direct:
        assert any((c.BN, c.cluster, c.order, c.swizzle, c.stream_k) == (d.BN, d.cluster, d.order, d.swizzle, d.stream_k)
                   and not c.pingpong for c in shortlist)
    monkeypatch.setenv("FO_SM90_TILES", "guess")
    with pytest.raises(sm90.GemmError, match="no tile table"):
        ta.candidates(2048, 4096, 7168, 132)


def _rows(shape, entries, shortlisted_direct=()):
    """The first entry is the model's pick; direct-C entries are twins (not shortlisted) unless named
    in ``shortlisted_direct`` (a ping-pong direct-C config in the shortlist)."""
    return [dict(M=shape[0], N=shape[1], K=shape[2], config=c, direct_c=d, shortlisted=not d or c in shortlisted_direct,
                 model=j == 0, tune_ms=i, graph_ms=g) for j, (c, d, i, g) in enumerate(entries)]


def test_a_shortlisted_pingpong_direct_config_is_weighed_as_the_shortlist():
    """The table's own pick may be a ping-pong direct-C config (128x168x64pd on 2600 x 4096 x 14336):
    it is one of the shortlist, not a twin, and the summary takes it as the model's pick."""
    df = pd.DataFrame(_rows((2600, 4096, 14336), [("168pd", True, 1.00, 1.00), ("256", False, 1.05, 1.02),
                                                  ("256d", True, 0.99, 0.97)], shortlisted_direct=("168pd",)))
    s = ta.summary(df).iloc[0]
    assert (s.tune_pick, s.graph_pick, s.pick_loss) == ("168pd", "168pd", 1.0)
    assert s.direct_gain == pytest.approx(1.00 / 0.97)  # the twin only, not the shortlisted pd


def test_the_shortlist_may_hold_a_pingpong_direct_config_apart_from_the_twins(monkeypatch):
    """With the committed table, autotuning's shortlist holds a ping-pong direct-C config where the
    table picks one, and no twin is also in the shortlist (measure marks rows by shortlist membership)."""
    monkeypatch.setenv("FO_SM90_TILES", str(TABLE))
    shortlist, direct, _ = ta.candidates(2600, 4096, 14336, 132)
    assert any(c.direct_c and c.pingpong for c in shortlist)  # the table's pick there: 128x168x64pd
    assert not set(shortlist) & set(direct)


def test_summary_says_what_the_tuned_pick_costs_in_the_benchmark_regime():
    df = pd.DataFrame(_rows((1, 2, 3), [("a", False, 1.00, 1.10), ("b", False, 1.05, 1.00), ("a_d", True, 0.90, 1.20)])
                      + _rows((4, 5, 6), [("a", False, 1.00, 1.00), ("b", False, 1.10, 1.05), ("b_d", True, 0.95, 0.98)])
                      + _rows((7, 8, 9), [("c", False, 2.0, 2.0)])
                      # tuning: b faster than the model's a, but by less than config_tuning.WIN: a stays
                      + _rows((1, 1, 1), [("a", False, 1.000, 1.0), ("b", False, 0.998, 1.1)]))
    s = ta.summary(df).set_index(["M", "N", "K"])
    # the regimes disagree: tuning takes a (the direct config, fastest when tuned, is not shortlisted)
    assert s.loc[(1, 2, 3), ["tune_pick", "graph_pick"]].tolist() == ["a", "b"]
    assert s.loc[(1, 2, 3), "pick_loss"] == pytest.approx(1.10) and s.loc[(1, 2, 3), "direct_gain"] == pytest.approx(1 / 1.2)
    # they agree, and a direct config beats the shortlist in the benchmark's regime
    assert s.loc[(4, 5, 6), "pick_loss"] == 1.0 and s.loc[(4, 5, 6), "direct_gain"] == pytest.approx(1.0 / 0.98)
    assert math.isnan(s.loc[(7, 8, 9), "direct_gain"])
    assert s.loc[(1, 1, 1), ["tune_pick", "pick_loss"]].tolist() == ["a", 1.0]


def test_summary_weighs_the_tunings_as_autotuning_does():
    """Rows that record a handicap (a single CTA on one wave) are weighed by it: a single CTA 1 %
    ahead of the cluster is not autotuning's pick, 5 % ahead it is; rows without the column: none."""
    h = 1 + config_tuning.ONE_WAVE_SINGLE_CTA
    for lead, want in ((0.01, "c2"), (0.05, "single")):
        rows = _rows((1, 1, 1), [("single", False, 1.0 - lead, 1.1), ("c2", False, 1.0, 1.0)])
        rows[0]["model"], rows[1]["model"] = False, True
        for r in rows:
            r["handicap"] = h if r["config"] == "single" else 1.0
        assert ta.summary(pd.DataFrame(rows)).iloc[0].tune_pick == want
        for r in rows:
            del r["handicap"]
        assert ta.summary(pd.DataFrame(rows)).iloc[0].tune_pick == "single"
