"""Overlap plans and CUDA graphs: a dropped plan is freed at once, a captured call outlives its plan
and communicator, and replays match eager calls of every primitive."""
import warnings

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


class _DropsGarbageWhileCaptured(LoopbackCommunicator):
    """A loopback link that, inside a graph capture, moves the last reference to a plan into a new
    reference cycle and then allocates: only Python's cyclic collector can free that plan, and with a
    threshold of 1 its next young-generation pass (the cycle is young) does, unless the capture holds
    the collector off. ``collector_on``: whether it was on at that moment."""

    def __init__(self, world_size, doomed):
        super().__init__(world_size)
        self.doomed, self.collector_on = doomed, None

    def all_reduce(self, buf, **kw):
        import gc

        if torch.cuda.is_current_stream_capturing() and self.doomed is not None:
            cycle = [self.doomed]
            cycle.append(cycle)
            self.doomed = None
            del cycle
            self.collector_on = gc.isenabled()
            _ = [[] for _ in range(100)]
        super().all_reduce(buf, **kw)


def test_garbage_freed_during_a_capture_cannot_invalidate_it():
    """A plan dropped in a reference cycle (an exception's traceback holds one so) owns captured
    graphs and events; the collector freeing it inside another plan's capture would invalidate that
    capture, and the plan would launch group by group or fail. The capture runs the collector first
    and holds it off until the end."""
    import gc
    import weakref

    old = OverlapPlan("all_reduce", 512, 640, 64, LoopbackCommunicator(2), config=gemm.CONFIGS["64x64x32"], ctas=8)
    assert old.executor.comm_graphs is not None
    alive = weakref.ref(old)
    comm = _DropsGarbageWhileCaptured(2, old)
    del old
    thresholds = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        with warnings.catch_warnings(record=True) as caught:  # a failed capture warns and falls back
            warnings.simplefilter("always")
            plan = OverlapPlan("all_reduce", 512, 640, 64, comm, config=gemm.CONFIGS["64x64x32"], ctas=8)
    finally:
        gc.set_threshold(*thresholds)
    assert not [w for w in caught if "could not be captured" in str(w.message)], [str(w.message) for w in caught]
    assert comm.doomed is None and comm.collector_on is False and plan.executor.comm_graphs is not None
    gc.collect()
    assert alive() is None
    a, b, C = _inputs(512, 640, 64, seed=5)
    assert calc_diff(plan.run(a, b), 2 * C) < TOL


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
