"""The overlap engine on one GPU with the loopback (emulated) link: every primitive against torch,
back-to-back calls reusing the counting table, a timed-out wait raising instead of hanging, the cold
path (a fresh process where every module loads lazily) and the default Hopper GEMM."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from engine_cases import TOL, expected as _expected, inputs as _inputs  # noqa: E402
from fo_lib import baselines, counting, gemm  # noqa: E402
from fo_lib.comm.loopback import LoopbackCommunicator  # noqa: E402
from fo_lib.engine import OverlapPlan, Routing  # noqa: E402
from fo_lib.postops import PostOps  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


@pytest.mark.parametrize("primitive", ["all_reduce", "reduce_scatter", "all_to_all"])
@pytest.mark.parametrize("W", [2, 4])
@pytest.mark.parametrize("M,N,K", [(1000, 1100, 64), (2048, 4096, 256), (333, 520, 40)])
def test_loopback_matches_torch(primitive, W, M, N, K):
    comm = LoopbackCommunicator(W)
    rng = np.random.default_rng(M + N)
    routing = None
    if primitive == "all_to_all":
        dest = rng.choice(W, size=M, p=rng.dirichlet(np.full(W, 0.5)))
        routing = Routing.from_destinations([dest] * W, shuffle_seed=M)
    # W=2: the communication side replayed as a captured graph (the default); W=4: group by group.
    plan = OverlapPlan(primitive, M, N, K, comm, config=gemm.CONFIGS["128x128x32"].with_raster("row", 4),
                       ctas=40, routing=routing, comm_graph=W == 2)
    assert plan.comm_graph_active == (W == 2)
    a, b, C = _inputs(M, N, K, seed=K)
    ops = PostOps(bias=True, activation="silu")
    bias = torch.randn(N, device="cuda").bfloat16()
    want = baselines.torch_post_ops(_expected(plan, C, W), ops, bias=bias.double())
    for call in range(3):  # back-to-back calls reuse the counting table (epoch targets)
        got = plan.run(a, b, ops=ops, bias=bias)
        torch.cuda.synchronize()
        plan.check()
        assert calc_diff(got, want) < TOL, (call, plan.describe())
    seq = baselines.sequential(plan, a, b, ops=ops, bias=bias)
    assert calc_diff(seq, want) < TOL
    dec = baselines.decomposition(plan, a, b, chunks=3, ops=ops, bias=bias)
    assert calc_diff(dec, want) < TOL


@pytest.mark.parametrize("comm_graph,schedule", [(True, "persistent"), (False, "persistent"), (True, "per_tile")])
def test_many_back_to_back_calls(comm_graph, schedule):
    comm = LoopbackCommunicator(2)
    plan = OverlapPlan("all_reduce", 1024, 2048, 128, comm, config=gemm.CONFIGS["128x128x32"], ctas=60,
                       partition=None, comm_graph=comm_graph, schedule=schedule)
    assert plan.comm_graph_active == comm_graph
    a, b, C = _inputs(1024, 2048, 128, seed=3)
    outs = [plan.run(a, b) for _ in range(100)]
    torch.cuda.synchronize()
    plan.check()
    assert max(calc_diff(o, 2 * C) for o in outs[::9]) < TOL
    assert plan.epoch == 100
    # The warm-up's counts were reset when the plan was built: exactly 100 calls' worth now.
    assert plan.executor.counters.cpu().numpy().tolist() == (100 * plan.tables.group_tiles).tolist()


@pytest.mark.parametrize("comm_graph", [True, False])
def test_timed_out_wait_raises_not_hangs(comm_graph):
    comm = LoopbackCommunicator(2)
    plan = OverlapPlan("all_reduce", 512, 1024, 64, comm, config=gemm.CONFIGS["128x128x32"], ctas=20,
                       timeout_ms=50, comm_graph=comm_graph)
    a, b, _ = _inputs(512, 1024, 64, seed=4)
    plan.run(a, b)
    torch.cuda.synchronize()
    plan.check()
    plan.executor.counters[0] -= 1_000_000  # group 0 can never reach its next target
    t0 = time.monotonic()
    plan.run(a, b)
    with pytest.raises(counting.WaitError, match="group 0"):
        plan.check()
    assert time.monotonic() - t0 < 10
    plan.reset()  # the plan is usable again
    y = plan.run(a, b)
    torch.cuda.synchronize()
    plan.check()
    assert calc_diff(y, 2 * (a.double() @ b.double().T)) < TOL


def test_cold_process_with_lazy_loading():
    """A fresh process (lazy module loading) builds a plan and runs: the plan's warm-up must load every
    kernel before a wait spins behind a producer, or this deadlocks (bounded here by the timeout)."""
    code = (
        "import torch; from fo_lib import gemm; from fo_lib.comm.loopback import LoopbackCommunicator;"
        "from fo_lib.engine import OverlapPlan; from fo_lib.testing import calc_diff;"
        "p = OverlapPlan('all_reduce', 700, 900, 64, LoopbackCommunicator(2), config=gemm.CONFIGS['64x64x32'],"
        " timeout_ms=5000);"
        "a = torch.randn(700, 64, device='cuda').bfloat16(); b = torch.randn(900, 64, device='cuda').bfloat16();"
        "y = p.run(a, b); torch.cuda.synchronize(); p.check();"
        "print('cold ok', calc_diff(y, 2 * (a.double() @ b.double().T)))")
    env = dict(os.environ, CUDA_MODULE_LOADING="LAZY")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = float(proc.stdout.split("cold ok")[1])
    assert err < TOL


def test_reduce_scatter_all_gather_restore():
    comm = LoopbackCommunicator(4)
    plan = OverlapPlan("reduce_scatter", 1000, 768, 64, comm, config=gemm.CONFIGS["128x128x32"], ctas=30)
    a, b, C = _inputs(1000, 768, 64, seed=5)
    local = plan.run(a, b)
    full = plan.all_gather(local)
    torch.cuda.synchronize()
    # Identical virtual ranks: every rank's rows are rank 0's rows, so the restored matrix repeats them.
    rows = torch.from_numpy(plan.owned_rows).cuda()
    assert calc_diff(full[rows], 4 * C[rows]) < TOL


def test_plan_rejects_wrong_device_inputs():
    plan = OverlapPlan("all_reduce", 256, 256, 64, LoopbackCommunicator(2), config=gemm.CONFIGS["64x64x32"])
    a, b, _ = _inputs(256, 256, 64, seed=6)
    from fo_lib.engine import PlanError
    with pytest.raises(PlanError, match="cpu"):
        plan.run(a.cpu(), b)


@pytest.mark.parametrize("primitive", ["all_reduce", "reduce_scatter", "all_to_all"])
def test_engine_default_gemm_is_hopper_on_sm90(primitive):
    """Without a config the plan takes the wgmma/TMA kernel on an sm_90 device, and the overlapped op
    is still exact with tails and several groups."""
    from fo_lib.gemm import sm90 as gemm_sm90

    W, M, N, K = 2, 1500, 1300, 200
    routing = None
    if primitive == "all_to_all":
        dest = np.random.default_rng(5).choice(W, size=M)
        routing = Routing.from_destinations([dest] * W)
    plan = OverlapPlan(primitive, M, N, K, LoopbackCommunicator(W), ctas=40, routing=routing, partition=None)
    assert isinstance(plan.config, gemm_sm90.Sm90Config) == gemm_sm90.is_supported()
    a, b, C = _inputs(M, N, K, seed=31)
    for _ in range(3):
        y = plan.run(a, b)
    torch.cuda.synchronize()
    plan.check()
    assert calc_diff(y, _expected(plan, C, W)) < TOL
