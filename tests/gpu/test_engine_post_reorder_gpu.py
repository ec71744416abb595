"""The overlapped call's post-reorder: row stages behind their groups' collectives on every path, the
rows layout, reductions summed by the post-reorder (AllReduce and ReduceScatter), and a bad post-op
operand raising with the streams joined."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from engine_cases import TOL, expected as _expected, inputs as _inputs  # noqa: E402
from fo_lib import baselines, gemm  # noqa: E402
from fo_lib.comm.loopback import LoopbackCommunicator  # noqa: E402
from fo_lib.engine import OverlapPlan, PlanError  # noqa: E402
from fo_lib.postops import PostOps  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


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
    """A bad post-reorder operand (bias missing for PostOps(bias=True)) raises before anything of the
    call is enqueued, with the caller's stream joined to the communication stream (nothing of an
    earlier call is left running unordered); the next call is right."""
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
