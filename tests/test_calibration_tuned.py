"""Tuned partitions from stored offline results on the CPU: the shipped H200 record gives the
partition ``python -m fo_lib tune`` gives with the same curve, profile and fitted constants, and
what is missing or mismatched is named."""
import json

import pytest

from fo_lib import provenance
from fo_lib import store
from fo_lib.engine import tuned
from fo_lib.comm.cpu_loopback import CpuLoopbackCommunicator
from fo_lib.engine import OverlapPlan, PlanError
from fo_lib.predictor import OverlapModel
from fo_lib.profiles import ProfileError
from fo_lib.records import read_curve, read_profile


def test_the_h200_record_tunes_as_the_model_does_by_hand():
    path = provenance.DATA_DIR / "h200" / store.PROFILES
    got = tuned.tuned_partition("all_reduce", 4096, 8192, 8192, world=2, gpu="h200")
    params = store.model_params("h200")["all_reduce"]
    profile, _, _ = read_profile(path, shape=(4096, 8192, 8192), primitive="all_reduce")
    want = OverlapModel(profile, read_curve(path, primitive="all_reduce"), "refined", **params).tune()
    assert got.partition == tuple(want.choice.partition) == (1, 3, 4)
    assert got.speedup == pytest.approx(want.speedup) and got.speedup > 1.1
    assert got.model_params == params and "record" in got.curve_from
    # Other constants, another choice: the fitted ones are really used.
    default = OverlapModel(profile, read_curve(path, primitive="all_reduce"), "refined").tune()
    assert default.choice.total_ms != pytest.approx(got.predicted_ms)


def test_every_recorded_primitive_tunes_and_a_caller_profile_is_used():
    path = provenance.DATA_DIR / "h200" / store.PROFILES
    for prim in ("all_reduce", "reduce_scatter", "all_to_all"):
        profile, _, _ = read_profile(path, shape=(4096, 8192, 8192), primitive=prim)
        got = tuned.tuned_partition(prim, 4096, 8192, 8192, world=2, gpu="h200", profile=profile)
        assert sum(got.partition) == profile.num_waves and got.profile_from == "measured by the caller"


def test_missing_or_mismatched_records_are_named(tmp_path, monkeypatch):
    with pytest.raises(ProfileError, match="no profile for"):
        tuned.tuned_partition("all_reduce", 1000, 8192, 8192, world=2, gpu="h200")
    with pytest.raises(ProfileError, match="of 2 ranks, not 4"):
        tuned.tuned_partition("all_reduce", 4096, 8192, 8192, world=4, gpu="h200")
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(provenance, "DATA_DIR", tmp_path / "data")
    with pytest.raises(ProfileError, match="python -m fo_lib calibrate"):
        tuned.tuned_partition("all_reduce", 4096, 8192, 8192, world=2, gpu="h100")
    with pytest.raises(ProfileError, match="nccl link curves"):
        tuned.tuned_partition("all_reduce", 4096, 8192, 8192, world=2, gpu="h100", link="nccl")


def test_nccl_curves_are_read_from_the_gpus_together_at_the_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(provenance, "DATA_DIR", tmp_path / "data")
    folder = store.calibration_dir("h100x4")
    folder.mkdir(parents=True)
    rows = ["primitive,world,nccl_max_ctas,bytes,ms"] + [
        f"all_reduce,4,{budget},{b},{0.01 * (1 + budget) + b / 4e8}"
        for budget in (0, 8) for b in (1 << 16, 1 << 20, 1 << 24, 1 << 28)]
    (folder / store.NCCL_CURVES).write_text("\n".join(rows) + "\n")
    curve, where = tuned.curve_for("all_reduce", 4, "h100", "nccl", budget=8)
    assert curve.world_size == 4 and where.startswith("calibration") and curve.times[0] > 0.09
    assert tuned.curve_for("all_reduce", 4, "h100", "nccl")[0].times[0] < 0.02
    with pytest.raises(ProfileError, match="no nccl link curves for h100x2: record them with scripts/multi_gpu.sh"):
        tuned.curve_for("all_reduce", 2, "h100", "nccl")
    assert tuned.link_of(CpuLoopbackCommunicator(2)) == "emulated"


def test_the_h200_pairs_nccl_record_has_a_curve_per_budget():
    curve, where = tuned.curve_for("reduce_scatter", 2, "h200", "nccl", budget=16)
    assert curve.world_size == 2 and "h200x2" in where


class _Rank:
    """A rank of a fake plan whose communicator broadcasts rank 0's object (``box``)."""

    device, reduction, M, N, K, primitive, world_size = "cuda", "collective", 512, 512, 64, "all_reduce", 2

    def __init__(self, rank, box):
        self.rank, self.box = rank, box
        self.comm = self

    def broadcast_object(self, obj):
        if self.rank == 0:
            self.box.append(obj)
        return self.box[0]


def test_rank_0_chooses_and_every_rank_runs_its_choice_or_raises_its_error(monkeypatch):
    chosen = []
    monkeypatch.setattr(tuned, "_choose", lambda plan, T: chosen.append(plan.rank) or ("ok", (1, 3)))
    box = []
    assert tuned.plan_partition(_Rank(0, box), 4) == (1, 3) and tuned.plan_partition(_Rank(1, box), 4) == (1, 3)
    assert chosen == [0]  # rank 1 measured nothing
    monkeypatch.setattr(tuned, "_choose", lambda plan, T: ("error", "no emulated link curves for h100"))
    box = []
    for rank in (0, 1):  # the same error on every rank, none left waiting
        with pytest.raises(PlanError, match="partition='tuned': no emulated link curves"):
            tuned.plan_partition(_Rank(rank, box), 4)


def test_copy_engine_communicators_have_no_recorded_budget():
    class CopyEngine:
        copy_engine, max_ctas = True, None
    with pytest.raises(ProfileError, match="copy engines"):
        tuned.nccl_budget(CopyEngine())


def test_a_cpu_plan_refuses_tuned_with_the_way_to_get_one():
    with pytest.raises(PlanError, match="tuned_partition"):
        OverlapPlan("all_reduce", 512, 512, 64, CpuLoopbackCommunicator(2), device="cpu", partition="tuned")
    with pytest.raises(PlanError, match="partition must be"):
        OverlapPlan("all_reduce", 512, 512, 64, CpuLoopbackCommunicator(2), device="cpu", partition="tune")


def test_the_fit_sidecar_of_the_h200_record_names_what_it_was_fitted_on():
    meta = json.loads((provenance.DATA_DIR / "h200" / "overlap_calibration.meta.json").read_text())
    assert meta["derived_from"] == ["overlap_loopback_candidates.csv", "overlap_loopback_profiles.json"]


def test_the_readme_tuned_example_prints_what_it_shows():
    import doctest
    import re

    text = (provenance.REPO_ROOT / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "tuned_partition" in b]
    test = doctest.DocTestParser().get_doctest(block, {}, "README tuned example", "README.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0 and runner.tries == 3
