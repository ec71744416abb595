"""The loopback (emulated) link itself: the SM-copy mode against the copy-engine one, the emulated
reductions' W * x with tails and guards, and refused modes."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from engine_cases import TOL, expected as _expected, inputs as _inputs  # noqa: E402
from fo_lib import gemm  # noqa: E402
from fo_lib.comm.loopback import LoopbackCommunicator  # noqa: E402
from fo_lib.engine import OverlapPlan, Routing  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


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
