import json

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fo_lib import partition as P
from fo_lib.predictor import OverlapModel, synthetic_model
from fo_lib.profiles import BandwidthCurve, GemmProfile, ProfileError

CURVE = BandwidthCurve(((1e3, 0.01), (1e6, 0.05), (1e8, 2.0), (1e9, 18.0)))


def test_paper_model_matches_algorithm_1_by_hand():
    # T=4, w=1 ms, 10 MB per wave; c(x) linear between (1e6, 0.05) and (1e8, 2.0).
    m = synthetic_model(4, 1.0, 10_000_000, CURVE, "paper")
    c = lambda x: float(np.interp(x, CURVE.sizes, CURVE.times))  # noqa: E731
    # Partition (1, 2, 1): p = 1, 3, 4.
    m1 = 1 + c(1e7)
    m2 = max(3, m1) + c(2e7)
    m3 = max(4, m2) + c(1e7)
    pred = m.predict((1, 2, 1))
    assert pred.total_ms == pytest.approx(m3)
    g = pred.groups
    assert [x.compute_end for x in g] == [1.0, 3.0, 4.0]
    assert g[1].comm_start == pytest.approx(max(3, m1)) and g[2].comm_end == pytest.approx(m3)
    assert [x.bytes for x in g] == [10_000_000, 20_000_000, 10_000_000]
    assert m.predict_no_overlap().total_ms == pytest.approx(4 + c(4e7))


@given(T=st.integers(1, 12), w=st.floats(0.01, 2.0), b=st.integers(1_000_000, 50_000_000),
       model=st.sampled_from(["paper", "refined"]))
def test_tune_is_the_brute_force_optimum(T, w, b, model):
    m = synthetic_model(T, w, b, CURVE, model, **({"launch_ms": 0.02, "comm_slowdown": 1.1,
                                                   "contention": ("uniform", "gemm_overlap")[T % 2]}
                                                  if model == "refined" else {}))
    res = m.tune()
    every = min(m.predict(p).total_ms for p in P.compositions(T))
    assert res.best.total_ms == pytest.approx(every, rel=1e-12)
    assert res.choice.total_ms <= res.no_overlap.total_ms
    assert res.best.total_ms <= res.finest.total_ms + 1e-12


def test_refined_uses_measured_waves_and_floor():
    prof = GemmProfile(M=1024, N=1024, K=1024, dtype="bf16", config={}, sm_count=132, comm_sms=4,
                       ctas=128, wave_ms=(1.0, 1.0, 0.2), wave_bytes=(100, 100, 20), full_ms=2.0)
    m = OverlapModel(prof, CURVE, "refined", launch_ms=0.5)
    # 20 bytes is below the curve: the latency floor alpha applies, never ~0.
    assert m.comm_ms(2, 3) >= CURVE.alpha_beta()[0] + 0.5
    assert m.predict_no_overlap().total_ms == pytest.approx(2.0 + CURVE.latency_ms(220))
    with pytest.raises(ProfileError, match="outside the sampled range|needs latencies"):
        OverlapModel(prof, CURVE, "paper")


def test_fallback_to_no_overlap_when_overlap_cannot_win():
    # Huge per-collective launch cost: splitting never pays; the tuner keeps one group.
    m = synthetic_model(8, 0.01, 1_000_000, CURVE, "refined", launch_ms=5.0)
    res = m.tune()
    assert res.choice.partition == (8,)
    assert res.to_dict()["overlap"] is False


def test_bad_models():
    with pytest.raises(ValueError, match="unknown model"):
        synthetic_model(4, 1.0, 1e7, CURVE, "magic")
    with pytest.raises(ValueError, match="slowdown factor"):
        synthetic_model(4, 1.0, 1e7, CURVE, "refined", comm_slowdown=0.5)


def test_profiles_round_trip(tmp_path):
    prof = GemmProfile(M=4096, N=8192, K=8192, dtype="bf16", config={"BM": 128}, sm_count=132, comm_sms=8,
                       ctas=124, wave_ms=(0.3, 0.3), wave_bytes=(8, 8), full_ms=0.55, gpu="H200")
    prof.save(tmp_path / "p.json")
    assert GemmProfile.load(tmp_path / "p.json") == prof
    CURVE.save(tmp_path / "c.json")
    assert BandwidthCurve.load(tmp_path / "c.json") == CURVE
    (tmp_path / "bare.json").write_text(json.dumps({"points": [[1, 1], [2, 3]]}))
    assert BandwidthCurve.load(tmp_path / "bare.json").interp_ms(1.5) == pytest.approx(2.0)


@pytest.mark.parametrize("text, msg", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"points": [[1, 1]]}', "at least two points"),
    ('{"points": [[2, 1], [1, 2]]}', "strictly increasing"),
    ('{"points": [[1, -1], [2, 2]]}', "positive"),
    ('{"points": "x"}', "list of \\[bytes, ms\\] pairs"),
    ('{"format": "fo_lib.bandwidth_curve", "version": 99, "points": [[1, 1], [2, 2]]}', "schema version"),
])
def test_bad_curve_files(tmp_path, text, msg):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ProfileError, match=msg):
        BandwidthCurve.load(path)


def test_bad_profile_files(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"format": "fo_lib.gemm_profile", "version": 1, "M": 1}))
    with pytest.raises(ProfileError, match="missing keys"):
        GemmProfile.load(path)
    with pytest.raises(ProfileError, match="cannot read"):
        GemmProfile.load(tmp_path / "nope.json")
    with pytest.raises(ProfileError, match="wave durations"):
        GemmProfile(M=1, N=1, K=1, dtype="bf16", config={}, sm_count=2, comm_sms=0, ctas=2,
                    wave_ms=(1.0,), wave_bytes=(1, 2), full_ms=1.0)


def test_comm_slowdown_only_while_the_gemm_computes():
    """A collective runs 1/comm_slowdown as fast beside the GEMM and at full speed after it: fully
    beside it takes cost x slowdown, after it takes cost, and a partial overlap lies in between,
    continuous and never finishing earlier for a later start (what keeps the search exact)."""
    prof = GemmProfile(M=1024, N=1024, K=1024, dtype="bf16", config={}, sm_count=132, comm_sms=4,
                       ctas=128, wave_ms=(1.0, 1.0), wave_bytes=(100, 100), full_ms=2.0)
    m = OverlapModel(prof, CURVE, "refined", comm_slowdown=2.0, contention="gemm_overlap")
    assert m.gemm_end == 2.0
    assert m.finish(0.0, 0.5) == pytest.approx(1.0)        # all of it beside the GEMM
    assert m.finish(2.5, 0.5) == pytest.approx(3.0)        # all of it after
    assert m.finish(1.5, 0.5) == pytest.approx(2.25)       # 0.25 of work by 2.0, the rest at full speed
    starts = np.linspace(0.0, 3.0, 301)
    ends = m.finish(starts, 0.5)
    assert (np.diff(ends) >= -1e-12).all() and np.abs(np.diff(ends)).max() < 0.011
    assert OverlapModel(prof, CURVE, "refined").finish(1.0, 0.5) == pytest.approx(1.5)
    # "uniform" (the default) stretches the whole collective of every group but the last instead.
    u = OverlapModel(prof, CURVE, "refined", comm_slowdown=2.0)
    assert u.finish(0.0, 0.5) == 0.5 and u.comm_ms(0, 1) == pytest.approx(2 * CURVE.latency_ms(100))
    assert u.comm_ms(1, 2) == pytest.approx(CURVE.latency_ms(100))
    with pytest.raises(ValueError, match="contention"):
        OverlapModel(prof, CURVE, "refined", contention="sometimes")


@given(T=st.integers(1, 10), w=st.sampled_from([0.05, 0.25, 1.0]), b=st.sampled_from([1_000_000, 8_388_608]),
       kw=st.sampled_from([{}, {"launch_ms": 0.02}, {"comm_slowdown": 1.3, "contention": "gemm_overlap"}]))
def test_search_applies_the_tie_rule_of_brute_force(T, w, b, kw):
    # The model's own search (cost matrix + finish) picks what the oracle's rule picks, fewest
    # groups among ties included.
    model = "refined" if kw else "paper"
    m = synthetic_model(T, w, b, CURVE, model, **kw)
    res = m.search()
    bf = P.brute_force(m._wave_ends, m.comm_ms, m.finish)
    assert res.partition == bf.partition
    assert res.latency == pytest.approx(m.predict(res.partition).total_ms, rel=1e-12)


def test_search_refuses_too_many_waves_before_allocating():
    import time
    m = synthetic_model(P.MAX_SEARCH_WAVES + 1, 0.01, 1000, CURVE, "refined")
    t0 = time.perf_counter()
    with pytest.raises(P.SearchSizeError, match=str(P.MAX_SEARCH_WAVES)):
        m.tune()
    assert time.perf_counter() - t0 < 2.0
