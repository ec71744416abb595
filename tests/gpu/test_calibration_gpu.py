"""The offline phase on the GPU: calibrate's tile table read by the picker, a tuned partition built
from this GPU's stored results (or refused with the command to run), and the first plain call of a
shape timing the table-free shortlist when there is no table."""
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from engine_cases import TOL, expected, inputs  # noqa: E402
from sm90_cases import NEEDS_SM90  # noqa: E402

from fo_lib import store  # noqa: E402
from fo_lib.calibration import offline  # noqa: E402
from fo_lib.engine import tuned  # noqa: E402
from fo_lib.comm.loopback import LoopbackCommunicator  # noqa: E402
from fo_lib.engine import OverlapPlan, PlanError  # noqa: E402
from fo_lib.gemm import config_tuning, tile_table  # noqa: E402
from fo_lib.gemm import sm90 as gemm_sm90  # noqa: E402
from fo_lib.gemm.sm90 import config_tuning as sm90_tuning  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


@NEEDS_SM90
def test_a_quick_tile_calibration_is_what_the_picker_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(tile_table.ENV_VAR, raising=False)
    report = offline.calibrate(["tiles"], quick=True, echo=lambda s: None)
    assert isinstance(report["tiles"], float)
    gpu = tile_table.current_gpu_tag()
    assert tile_table.table_path() == str(store.calibration_dir(gpu) / store.TILES)
    table = gemm_sm90.load_table(tile_table.table_path())  # every config the picker weighs, recorded
    assert all(table.has(n) for n in gemm_sm90.CANDIDATES if gemm_sm90.sm_count() % gemm_sm90.CONFIGS[n].cluster == 0)
    manifest = json.loads((store.calibration_dir(gpu) / offline.MANIFEST).read_text())
    assert manifest["parts"]["tiles"]["quick"] is True
    # Done: a second run measures nothing.
    assert offline.calibrate(["tiles"], quick=True, echo=lambda s: None)["tiles"] == "done earlier"


def test_a_tuned_plan_runs_this_gpus_choice_or_names_the_command():
    comm = LoopbackCommunicator(2)
    M, N, K = 4096, 4096, 1024
    gpu = tile_table.current_gpu_tag()
    if store.find(store.PROFILES, gpu, warn=False) is None:
        with pytest.raises(PlanError, match="python -m fo_lib calibrate"):
            OverlapPlan("all_reduce", M, N, K, comm, partition="tuned")
        return
    plan = OverlapPlan("all_reduce", M, N, K, comm, partition="tuned")
    assert sum(plan.partition) == plan.grid.num_waves
    a, b, C = inputs(M, N, K, seed=5)
    got = plan.run(a, b)
    torch.cuda.synchronize()
    plan.check()
    assert calc_diff(got, expected(plan, C, 2)) < TOL
    with pytest.raises(PlanError, match="reduction='collective'"):
        OverlapPlan("all_reduce", M, N, K, comm, partition="tuned", reduction="post_reorder")


@NEEDS_SM90
def test_without_a_table_the_first_call_times_the_table_free_shortlist(tmp_path, monkeypatch):
    from gemm_helpers import ref

    monkeypatch.setenv(tile_table.ENV_VAR, "guess")
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path))
    config_tuning.forget()
    M, N, K = 1536, 3584, 2048
    g = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
    b = torch.randn(N, K, device="cuda", generator=g).bfloat16()
    out = gemm_sm90.gemm_nt(a, b)
    torch.cuda.synchronize()
    assert calc_diff(out, ref(a, b)) < 1e-2
    (entry,) = json.loads((tmp_path / config_tuning.FILE_NAME).read_text()).values()
    sms = gemm_sm90.sm_count()
    shortlist = sm90_tuning.table_free_candidates(M, N, K, sms, gemm_sm90.guess_config(M, N, K, sms))
    assert set(entry["ms"]) == {gemm_sm90.config_label(c) for c in shortlist}
    assert gemm_sm90.config_for(a, b) in shortlist
    config_tuning.forget()


def test_the_link_of_a_loopback_is_the_emulated_one():
    assert tuned.link_of(LoopbackCommunicator(2)) == "emulated"
