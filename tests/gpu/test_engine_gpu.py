"""The overlap engine on one GPU with the loopback (emulated) link: every primitive against torch,
back-to-back calls reusing the counting table, a timed-out wait raising instead of hanging, and the
cold path (a fresh process where every module loads lazily)."""
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

from fo_lib import baselines, counting, gemm  # noqa: E402
from fo_lib.comm.loopback import LoopbackCommunicator  # noqa: E402
from fo_lib.engine import OverlapPlan, PlanError, Routing  # noqa: E402
from fo_lib.postops import PostOps  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]
TOL = 2e-2


def _inputs(M, N, K, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
    b = torch.randn(N, K, device="cuda", generator=g).bfloat16()
    return a, b, a.double() @ b.double().T


def _expected(plan, C, W):
    if plan.primitive == "all_reduce":
        return W * C
    if plan.primitive == "reduce_scatter":
        return W * C[torch.from_numpy(plan.owned_rows).cuda()]
    out = torch.zeros(plan.out_rows, C.shape[1], dtype=torch.float64, device="cuda")
    for s in range(W):  # identical virtual ranks: every source sends the same rows
        m = plan.routing.dest[s] == plan.comm.rank
        out[torch.from_numpy(plan.routing.dst_index[s][m]).cuda()] = C[torch.from_numpy(np.flatnonzero(m)).cuda()]
    return out


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


def test_a_dropped_cuda_plan_is_freed_at_once():
    """No plan <-> executor cycle: a dropped plan's pinned buffers and events go with its last
    reference, not later from the cyclic GC (which could run inside another plan's graph capture and
    invalidate it)."""
    import gc
    import weakref

    plan = OverlapPlan("all_reduce", 512, 640, 64, LoopbackCommunicator(2), config=gemm.CONFIGS["64x64x32"], ctas=8)
    a, b, _ = _inputs(512, 640, 64, seed=3)
    plan.run(a, b)
    plan.check()
    gc.disable()
    try:
        alive = weakref.ref(plan), weakref.ref(plan.executor)
        del plan
        assert alive[0]() is None and alive[1]() is None
    finally:
        gc.enable()


def test_a_captured_call_outlives_its_plan_and_communicator():
    """The graph replays into the communicator's staging buffers and the executor's own: dropping
    the plan and the communicator (only the GraphedCall kept) must leave the replay correct."""
    import gc

    M, N, K, W = 700, 900, 96, 2
    plan = OverlapPlan("all_reduce", M, N, K, LoopbackCommunicator(W), config=gemm.CONFIGS["64x64x32"], ctas=50)
    a, b, _ = _inputs(M, N, K, seed=21)
    graphed = plan.capture(a, b)
    del plan
    gc.collect()
    torch.cuda.empty_cache()
    churn = [torch.randn(1 << 22, device="cuda") for _ in range(8)]  # reuse whatever was freed
    for seed in (22, 23):
        a2, b2, C2 = _inputs(M, N, K, seed=seed)
        a.copy_(a2)
        b.copy_(b2)
        y = graphed()
        torch.cuda.synchronize()
        assert calc_diff(y, W * C2) < TOL, seed
    del churn


@pytest.mark.parametrize("primitive", ["all_reduce", "reduce_scatter", "all_to_all"])
def test_cuda_graph_replay_matches_eager(primitive):
    """A captured call replays on new data in its static inputs; eager calls of the same plan keep
    working before and after (waits read the plan's device epoch, which every call advances)."""
    W, M, N, K = 2, 700, 900, 96
    comm = LoopbackCommunicator(W)
    routing = None
    if primitive == "all_to_all":
        dest = np.random.default_rng(1).choice(W, size=M)
        routing = Routing.from_destinations([dest] * W, shuffle_seed=2)
    plan = OverlapPlan(primitive, M, N, K, comm, config=gemm.CONFIGS["64x64x32"], ctas=50, routing=routing)
    a, b, C = _inputs(M, N, K, seed=11)
    eager = plan.run(a, b).clone()
    torch.cuda.synchronize()
    plan.check()
    graphed = plan.capture(a, b)
    for seed in (12, 13, 14):
        a2, b2, C2 = _inputs(M, N, K, seed=seed)
        a.copy_(a2)
        b.copy_(b2)
        y = graphed()
        torch.cuda.synchronize()
        plan.check()
        assert calc_diff(y, _expected(plan, C2, W)) < TOL, seed
    y = plan.run(a, b)  # eager again after replays
    torch.cuda.synchronize()
    plan.check()
    assert calc_diff(y, _expected(plan, C2, W)) < TOL
    assert calc_diff(eager, _expected(plan, C, W)) < TOL


def test_row_parallel_linear_module_with_graphs():
    """The module builds a plan per token count and, with graphs=True, replays captured calls that
    follow new inputs and new weights."""
    from fo_lib.modules import RowParallelLinear

    comm = LoopbackCommunicator(2)
    layer = RowParallelLinear(96, 520, comm, bias=True, ops=PostOps(activation="relu"), graphs=True,
                              plan_kw=dict(config=gemm.CONFIGS["64x64x32"], ctas=40))
    for M in (300, 300, 300, 128):
        x = torch.randn(M, 96, device="cuda").bfloat16()
        with torch.no_grad():
            layer.weight.normal_()
            layer.bias.normal_()
        want = baselines.torch_post_ops(2 * (x.double() @ layer.weight.double().T), PostOps(bias=True, activation="relu"),
                                        bias=layer.bias.double())
        got = layer(x)
        torch.cuda.synchronize()
        assert calc_diff(got, want) < TOL, M
    assert len(layer._cache.plans) == 2


@pytest.mark.parametrize("graphs", [False, True])
def test_row_parallel_linear_rows_layout_outputs_outlive_the_next_call(graphs):
    """In the rows layout a plain AllReduce returns the plan's buffer; a module must hand out its own
    tensor, so an earlier output keeps its values after later calls."""
    from fo_lib.modules import RowParallelLinear

    layer = RowParallelLinear(128, 640, LoopbackCommunicator(2), graphs=graphs,
                              plan_kw=dict(config=gemm.CONFIGS["64x64x32"].with_raster("row", 1), ctas=40,
                                           layout="rows"))
    xs = [torch.randn(500, 128, device="cuda").bfloat16() for _ in range(3)]
    outs = [layer(x) for x in xs]
    torch.cuda.synchronize()
    plan = next(iter(layer._cache.plans.values()))
    assert plan.layout == "rows" and plan.num_groups > 1
    for x, y in zip(xs, outs):
        assert y.data_ptr() != plan.send.data_ptr()
        assert calc_diff(y, 2 * (x.double() @ layer.weight.double().T)) < TOL


@pytest.mark.parametrize("M,K", [(4096, 4096), (256, 64)])
def test_modules_with_an_overlap_check(M, K):
    """With check=OverlapCheck() each shape's first call times the overlapped call against the
    fallback on the GPU, decides once, and every call gives the right result either way."""
    from fo_lib.modules import RowParallelLinear
    from fo_lib.partition_tuning import OverlapCheck

    layer = RowParallelLinear(K, 1024, LoopbackCommunicator(2), check=OverlapCheck(rounds=2, inner=2))
    x = torch.randn(M, K, device="cuda").bfloat16()
    want = 2 * (x.double() @ layer.weight.double().T)
    for _ in range(3):
        got = layer(x)
        torch.cuda.synchronize()
        assert calc_diff(got, want) < TOL
    (plan,) = layer._cache.plans.values()
    assert isinstance(plan._module_keep, bool)
    t = OverlapCheck(rounds=2, inner=2).timings(plan.comm, lambda: layer(x), lambda: baselines.sequential(
        plan, x, layer.weight.detach()))
    assert set(t) == {"overlap", "fallback"} and min(t.values()) > 0


@pytest.mark.parametrize("primitive", ["all_reduce", "reduce_scatter", "all_to_all"])
def test_loopback_sm_copy_mode(primitive):
    """The SM-copy link gives the same results as the copy-engine link, and really moves its volume
    (a 2-rank AllReduce of 64 MiB moves 64 MiB each way through host memory: it cannot take under
    0.1 ms on any host link)."""
    W, M, N, K = 2, 640, 768, 64
    comm = LoopbackCommunicator(W, mode="sm_copy", ctas=6)
    assert comm.sm_footprint == 6
    routing = None
    if primitive == "all_to_all":
        dest = np.random.default_rng(3).choice(W, size=M)
        routing = Routing.from_destinations([dest] * W)
    plan = OverlapPlan(primitive, M, N, K, comm, config=gemm.CONFIGS["64x64x32"], routing=routing)
    assert plan.ctas == gemm.sm_count() - 6
    a, b, C = _inputs(M, N, K, seed=21)
    y = plan.run(a, b)
    torch.cuda.synchronize()
    plan.check()
    assert calc_diff(y, _expected(plan, C, W)) < TOL
    buf = torch.ones(32 << 20, dtype=torch.bfloat16, device="cuda")
    comm.all_reduce(buf)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    comm.all_reduce(buf)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0.1
    assert float(buf[0]) == 4.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("n", [1, 7, 8, 1000, 8 * 256 * 4 * 3 + 5, (1 << 20) + 3])
def test_loopback_reduction_finish(dtype, n):
    """The emulated reductions' W * x (the link's scale kernel for aligned 16-bit data, torch for
    the rest), in place and into another buffer, with tails of every length, against torch; the
    NaN-poisoned elements around the destination stay untouched."""
    W = 3
    comm = LoopbackCommunicator(W)
    x = torch.randn(n + 16, device="cuda").to(dtype)
    for offset in (0, 8, 3):  # 3: a 6-byte offset for 16-bit data, the torch path
        src = x[offset:offset + n]
        want = src.float() * W
        guard = torch.full((n + 32,), float("nan"), device="cuda").to(dtype)
        dst = guard[offset + 8:offset + 8 + n]
        comm._sum_of_copies(src, dst)
        inplace = src.clone()
        comm._sum_of_copies(inplace, inplace)
        torch.cuda.synchronize()
        assert torch.equal(dst, want.to(dtype)), f"offset {offset}"
        assert torch.equal(inplace, want.to(dtype)), f"offset {offset}, in place"
        assert torch.isnan(guard[:offset + 8]).all() and torch.isnan(guard[offset + 8 + n:]).all()


def test_loopback_rejects_bad_mode():
    with pytest.raises(ValueError, match="mode"):
        LoopbackCommunicator(2, mode="nvlink")
    with pytest.raises(ValueError, match="ctas"):
        LoopbackCommunicator(2, mode="sm_copy", ctas=0)


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


@pytest.mark.parametrize("primitive", ["all_reduce", "reduce_scatter", "all_to_all"])
def test_timed_run_timeline_is_ordered_and_output_unchanged(primitive):
    """timed_run returns the same output as run and a timeline in causal order: the collectives run
    one after another on the communication stream, the post-reorder after the last of them."""
    from fo_lib.experiments.overlap import benchmark_routing

    M, N, K = 2048, 4096, 512
    routing = benchmark_routing(M, N, K, 2) if primitive == "all_to_all" else None
    plan = OverlapPlan(primitive, M, N, K, LoopbackCommunicator(2), config=gemm.CONFIGS["128x128x32"], ctas=60,
                       routing=routing)
    a, b, C = _inputs(M, N, K, seed=21)
    want = plan.run(a, b).clone()
    got, rows = plan.timed_run(a, b)
    assert torch.equal(got, want)
    gemm_row = rows[0]
    groups = [r for r in rows if r["span"] == "group"]
    posts = [r for r in rows if r["span"] == "post"]
    assert gemm_row["span"] == "gemm" and len(groups) == plan.num_groups
    assert [r["group"] for r in posts] == [g for g, _, _ in plan.post_stages] and len(rows) == 1 + len(groups) + len(posts)
    eps = 0.005  # ms: events on two streams
    assert groups[0]["start_ms"] <= gemm_row["end_ms"] + eps  # the first group is ready before the GEMM ends
    for g, r in enumerate(groups):
        assert r["group"] == g and r["start_ms"] <= r["end_ms"]
        if g:
            assert groups[g - 1]["end_ms"] <= r["start_ms"] + eps
    for r in posts:  # each stage after its group's collective and after the GEMM (same stream)
        assert r["start_ms"] >= max(groups[r["group"]]["end_ms"], gemm_row["end_ms"]) - eps
        assert r["end_ms"] >= r["start_ms"]
    assert posts[-1]["group"] == int(plan.post_stages[-1][0]) and posts[-1]["end_ms"] == max(r["end_ms"] for r in rows)
    assert plan.epoch == 2  # the timed call counted as a call


def test_timed_run_rejects_a_gate_shorter_than_the_host_enqueue():
    """A gate that opens before the host has launched every group would put host time in the
    timeline: timed_run must say so (and the call must still have completed cleanly)."""
    M, N, K = 2048, 4096, 512
    plan = OverlapPlan("all_reduce", M, N, K, LoopbackCommunicator(2), config=gemm.CONFIGS["128x128x32"], ctas=60)
    a, b, C = _inputs(M, N, K, seed=22)
    with pytest.raises(PlanError, match="gate"):
        plan.timed_run(a, b, gate_ms=0.001)
    with pytest.raises(PlanError, match="gate_ms"):
        plan.timed_run(a, b, gate_ms=0)
    y = plan.run(a, b)
    torch.cuda.synchronize()
    plan.check()
    assert calc_diff(y, _expected(plan, C, 2)) < TOL


@pytest.mark.parametrize("primitive", ["all_reduce", "reduce_scatter"])
def test_staged_post_reorder_every_path(primitive):
    """Group by group (comm_graph=False), with the replayed communication graphs (one per stage) and
    in a whole-call graph, the post-reorder runs in row stages, each behind its group's collective,
    on row slices of out / residual / residual_out: every path must give the same result as the
    float64 reference, RMSNorm included."""
    M, N, K, W = 2048, 1536, 256, 2
    cfg = gemm.CONFIGS["128x128x32"].with_raster("row", 2)
    plans = [OverlapPlan(primitive, M, N, K, LoopbackCommunicator(W), config=cfg, ctas=24, comm_graph=cg,
                         partition=None) for cg in (True, False)]
    assert len(plans[1].post_stages) == 2 and plans[0].comm_graph_active and not plans[1].comm_graph_active
    assert len(plans[0].executor.comm_graphs) == 2, "one communication graph per post-reorder stage"
    a, b, C = _inputs(M, N, K, seed=31)
    R = plans[0].out_rows
    ops = PostOps(bias=True, residual=True, residual_out=True, rmsnorm=True)
    bias, weight = (torch.randn(N, device="cuda").bfloat16() for _ in range(2))
    residual = torch.randn(R, N, device="cuda").bfloat16()
    want = baselines.torch_post_ops(_expected(plans[0], C, W), ops, bias=bias.double(), residual=residual.double(),
                                    weight=weight.double())
    results = []
    for plan in plans:
        res_out, out = torch.full_like(residual, float("nan")), torch.full((R, N), float("nan"), device="cuda").bfloat16()
        got = plan.run(a, b, ops=ops, bias=bias, residual=residual, residual_out=res_out, weight=weight, out=out)
        torch.cuda.synchronize()
        plan.check()
        assert got.data_ptr() == out.data_ptr() and calc_diff(got, want) < TOL, plan.describe()
        results.append((got.clone(), res_out.clone()))
    # The pre-norm values are element-wise: identical. A short stage spreads each row over more
    # threads (launch_config), so the RMS sum may round differently: within a bf16 step.
    assert torch.equal(results[0][1], results[1][1])
    close = dict(rtol=1e-2, atol=1e-2)
    assert torch.allclose(results[0][0].float(), results[1][0].float(), **close)
    graphed = plans[1].capture(a, b, ops=ops, bias=bias, residual=residual, residual_out=res_out, weight=weight)
    assert torch.allclose(graphed().float(), results[0][0].float(), **close)
    with pytest.raises(PlanError, match="residual must be"):
        plans[1].run(a, b, ops=ops, bias=bias, residual=residual[:-1], weight=weight)


def _fused_all_reduce(M, N, K, W, seed, hopper, order, swizzle):
    """An AllReduce case with fused bias + residual + RMSNorm on ``W`` identical loopback ranks: the
    GEMM config (Hopper or portable, skipped where the GPU has no Hopper kernel), the inputs, the
    post-op operands and their float64 result."""
    from fo_lib.gemm import sm90 as gemm_sm90
    if hopper and not gemm_sm90.is_supported():
        pytest.skip("needs a compute capability 9.0 GPU")
    cfg = (gemm_sm90.CONFIGS["128x128x64"] if hopper else gemm.CONFIGS["128x128x32"]).with_raster(order, swizzle)
    a, b, C = _inputs(M, N, K, seed=seed)
    ops = PostOps(bias=True, residual=True, rmsnorm=True)
    bias, weight = (torch.randn(N, device="cuda").bfloat16() for _ in range(2))
    operands = dict(bias=bias, residual=torch.randn(M, N, device="cuda").bfloat16(), weight=weight)
    want = baselines.torch_post_ops(W * C, ops, **{k: v.double() for k, v in operands.items()})
    return cfg, a, b, C, ops, operands, want


@pytest.mark.parametrize("hopper", [False, True])
def test_rows_layout_all_reduce(hopper):
    """The rows layout: groups of whole tile rows, the GEMM storing C in place. With no post-op a call
    returns the plan's buffer (no post-reorder runs); with post-ops and out= it matches the tiles
    layout; eager (communication graph and group by group) and captured calls agree, over repeats."""
    M, N, K, W = 3000, 2100, 192, 2
    cfg, a, b, C, ops, operands, want_ops = _fused_all_reduce(M, N, K, W, 41, hopper, "row", 1)
    for comm_graph in (True, False):
        plan = OverlapPlan("all_reduce", M, N, K, LoopbackCommunicator(W), config=cfg, ctas=30,
                           partition=None, comm_graph=comm_graph, layout="rows")
        assert plan.num_groups > 1 and plan.executor.store_table is None
        for call in range(3):
            plan.send.fill_(float("nan"))  # poisoned: the GEMM must write every element
            got = plan.run(a, b)
            assert got.data_ptr() == plan.send.data_ptr() and tuple(got.shape) == (M, N)
            torch.cuda.synchronize()
            plan.check()
            assert calc_diff(got, W * C) < TOL, (call, plan.describe())
        out = torch.full((M, N), float("nan"), device="cuda").bfloat16()
        got = plan.run(a, b, ops=ops, out=out, **operands)
        torch.cuda.synchronize()
        plan.check()
        assert got.data_ptr() == out.data_ptr() and calc_diff(got, want_ops) < TOL
        copy = plan.run(a, b, out=torch.empty(M, N, device="cuda").bfloat16())  # out= gets a copy
        torch.cuda.synchronize()
        assert copy.data_ptr() != plan.send.data_ptr() and calc_diff(copy, W * C) < TOL
    graphed = plan.capture(a, b)
    a2, b2, C2 = _inputs(M, N, K, seed=42)
    a.copy_(a2)
    b.copy_(b2)
    for _ in range(2):
        y = graphed()
        torch.cuda.synchronize()
        plan.check()
        assert calc_diff(y, W * C2) < TOL
    tiles = OverlapPlan("all_reduce", M, N, K, LoopbackCommunicator(W), config=cfg, ctas=30,
                        partition=plan.partition, layout="tiles")
    assert torch.equal(tiles.run(a, b), plan.run(a, b))


def test_bad_post_operand_raises_with_the_streams_joined():
    """A post-reorder operand that only the launcher's checks catch (bias missing for PostOps(bias=
    True)) raises after the GEMM and the collectives are enqueued, with the caller's stream joined to
    the communication stream (nothing of the call is left running unordered); the next call is
    right."""
    M, N, K, W = 512, 768, 128, 2
    plan = OverlapPlan("all_reduce", M, N, K, LoopbackCommunicator(W), config=gemm.CONFIGS["128x128x32"])
    a, b, C = _inputs(M, N, K, seed=41)
    torch.cuda.synchronize()
    # The communication stream is held back (~50 ms on the GPU), so that without the join the caller's
    # stream would finish long before it.
    with torch.cuda.stream(plan.executor.comm_stream):
        torch.cuda._sleep(100_000_000)
    with pytest.raises(ValueError, match="bias"):
        plan.run(a, b, ops=PostOps(bias=True))
    # Joined: an event on the caller's stream completes only after the communication stream's work.
    comm_done = torch.cuda.Event()
    comm_done.record(plan.executor.comm_stream)
    joined = torch.cuda.Event()
    joined.record(torch.cuda.current_stream())
    joined.synchronize()
    assert comm_done.query()
    y = plan.run(a, b)
    torch.cuda.synchronize()
    plan.check()
    assert calc_diff(y, _expected(plan, C, W)) < TOL


@pytest.mark.parametrize("hopper", [False, True])
@pytest.mark.parametrize("W", [2, 3])
@pytest.mark.parametrize("N", [1100, 1024])  # scalar and 16-byte post-reorder paths
def test_all_reduce_reduced_by_the_post_reorder(hopper, W, N):
    """reduction='post_reorder': an in-place AllGather per group into W copies, summed by the
    post-reorder. Matches the dense reference with fused post-ops (eager with and without the
    communication graph, captured replays), with the buffer poisoned before every call; the GEMM
    writes only this rank's copy, so the emulated AllGather must fill the others."""
    M, K = 1500, 128
    cfg, a, b, C, ops, operands, want = _fused_all_reduce(M, N, K, W, 43 + W, hopper, "row", 2)
    for comm_graph in (True, False):
        plan = OverlapPlan("all_reduce", M, N, K, LoopbackCommunicator(W), config=cfg, ctas=20,
                           comm_graph=comm_graph, reduction="post_reorder")
        assert plan.num_groups > 1 and plan.sources == W and plan.send.numel() == W * M * N
        assert len(plan.post_stages) == 2  # the early rows beside the last group's AllGather
        for call in range(3):
            plan.send.fill_(float("nan"))
            got = plan.run(a, b) if call else plan.run(a, b, ops=ops, **operands)
            torch.cuda.synchronize()
            plan.check()
            assert calc_diff(got, W * C if call else want) < TOL, (call, plan.describe())
    graphed = plan.capture(a, b, ops=ops, **operands)
    for _ in range(2):
        plan.send.fill_(float("nan"))
        y = graphed()
        torch.cuda.synchronize()
        plan.check()
        assert calc_diff(y, want) < TOL
    collective = OverlapPlan("all_reduce", M, N, K, LoopbackCommunicator(W), config=cfg, ctas=20,
                             partition=plan.partition)
    assert calc_diff(collective.run(a, b), plan.run(a, b)) < 1e-2



@pytest.mark.parametrize("hopper", [False, True])
@pytest.mark.parametrize("W", [2, 4])
def test_reduce_scatter_reduced_by_the_post_reorder(hopper, W):
    """reduction='post_reorder' for ReduceScatter: an All-to-All per group brings this rank W copies
    of its chunk, the post-reorder sums them. Matches the dense reference and the collective's plan,
    eager (with and without the communication graph) and captured, buffers poisoned before calls."""
    from fo_lib.gemm import sm90 as gemm_sm90
    if hopper and not gemm_sm90.is_supported():
        pytest.skip("needs a compute capability 9.0 GPU")
    M, N, K = 1536, 1100, 128
    cfg = (gemm_sm90.CONFIGS["128x128x64"] if hopper else gemm.CONFIGS["128x128x32"]).with_raster("col", 2)
    a, b, C = _inputs(M, N, K, seed=71 + W)
    for comm_graph in (True, False):
        plan = OverlapPlan("reduce_scatter", M, N, K, LoopbackCommunicator(W), config=cfg, ctas=20,
                           comm_graph=comm_graph, reduction="post_reorder")
        assert plan.num_groups > 1 and plan.sources == W and plan.recv_elements == plan.send.numel()
        for _ in range(2):
            plan.send.fill_(float("nan"))
            got = plan.run(a, b)
            torch.cuda.synchronize()
            plan.check()
            assert calc_diff(got, _expected(plan, C, W)) < TOL, plan.describe()
    graphed = plan.capture(a, b)
    plan.send.fill_(float("nan"))
    y = graphed()
    torch.cuda.synchronize()
    plan.check()
    assert calc_diff(y, _expected(plan, C, W)) < TOL
    collective = OverlapPlan("reduce_scatter", M, N, K, LoopbackCommunicator(W), config=cfg, ctas=20,
                             partition=plan.partition)
    assert calc_diff(collective.run(a, b), plan.run(a, b)) < 1e-2
