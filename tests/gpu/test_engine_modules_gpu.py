"""fo_lib.modules' RowParallelLinear over the loopback link: a plan per token count, captured calls
following new inputs and weights, outputs of their own in the rows layout, and the overlap check."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from engine_cases import TOL  # noqa: E402
from fo_lib import baselines, gemm  # noqa: E402
from fo_lib.comm.loopback import LoopbackCommunicator  # noqa: E402
from fo_lib.postops import PostOps  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


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
