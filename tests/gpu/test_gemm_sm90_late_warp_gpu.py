"""The Hopper GEMM with a warp made late (compiled-in sleeps, in processes of their own): walks without
reads and ping-pong's hand-over must wait for it, and without the walk's meeting the hang trap fires."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from sm90_cases import NEEDS_SM90  # noqa: E402

pytestmark = [pytest.mark.gpu, NEEDS_SM90]


# A warpgroup that walks stages without reading them (the second warpgroup of a tile row past M, a
# cluster's phantom unit) frees each with one thread's arrival once its warps have met (walk_bar).
# Compiled with a warp that sleeps before each wait of a walk (FO_SM90_WALK_LAG_NS), in a process of
# its own (a trapped launch ends its CUDA context): with the meeting the launches finish, correct;
# without it (FO_SM90_WALK_MEET=0) the late warp waits on a later phase and the hang trap fires.
# (The script follows a line CASES = [(label, M, N, K, ctas), ...].)
WALK_SCRIPT = """
import torch
from fo_lib.experiments.kernel_bench import config_variant
from fo_lib.gemm import sm90
for label, M, N, K, ctas in CASES:
    cfg = config_variant(sm90.CONFIGS, label, M)
    g = torch.Generator(device="cuda").manual_seed(M + N)
    a = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16)
    out = sm90.gemm_nt(a, b, config=cfg, ctas=ctas)
    want = a.double() @ b.double().T
    err = float((out.double() - want).norm() / want.norm())
    assert err < 1e-2, (label, err)
    print("ok", label, f"{err:.2e}", flush=True)
"""


def _with_a_late_warp(tmp_path, script: str, options: str):
    """``script`` run in a process of its own with the kernels compiled with ``options`` and the
    hang trap (a fresh kernel cache)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, FO_CACHE_DIR=str(tmp_path / "cache"), FO_NVRTC_OPTIONS=f"{options} -DFO_SM90_HANG_TRAP=1",
               FO_SM90_AUTOTUNE="0", PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180,
                          cwd=repo)


def _walk_with_a_late_warp(tmp_path, meet: bool):
    cases = '[("128x256x64/row1", 130, 1024, 4096, 132), ("128x128x64c2/row2", 100, 640, 4096, 132)]'
    options = "-DFO_SM90_WALK_LAG_NS=20000" + ("" if meet else " -DFO_SM90_WALK_MEET=0")
    return _with_a_late_warp(tmp_path, f"CASES = {cases}" + WALK_SCRIPT, options)


def test_a_walk_waits_for_its_late_warp(tmp_path):
    run = _walk_with_a_late_warp(tmp_path, meet=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.count("ok ") == 2 and "fo_sm90 hang" not in run.stdout


def test_without_the_meeting_a_late_walking_warp_hangs(tmp_path):
    run = _walk_with_a_late_warp(tmp_path, meet=False)
    assert run.returncode != 0 and "fo_sm90 hang" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]


@pytest.mark.parametrize("handover_all", [False, True])
def test_ping_pong_hands_its_turn_over_with_no_warp_behind(tmp_path, handover_all):
    """Ping-pong thread 0 (FO_SM90_HANDOVER_ALL=1: every thread) hands the tensor cores to the other
    warpgroup once its unit's MMAs are issued; with units of one k-block (K = 64) and warps 1-3 late
    at their order barrier (FO_SM90_ORDER_LAG_NS), the launches must still finish, correct (a warp
    left two turns behind would wait on a later phase)."""
    # Two CTAs: 32 units each, the warpgroups' turns alternating.
    cases = '[("128x128x64p/row1", 1024, 1024, 64, 2), ("128x176x64pd/row1", 1000, 1000, 128, 2)]'
    options = f"-DFO_SM90_ORDER_LAG_NS=20000 -DFO_SM90_HANDOVER_ALL={int(handover_all)}"
    run = _with_a_late_warp(tmp_path, f"CASES = {cases}" + WALK_SCRIPT, options)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.count("ok ") == 2 and "fo_sm90 hang" not in run.stdout
