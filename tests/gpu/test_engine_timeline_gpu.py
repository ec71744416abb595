"""An overlapped call's measured timeline (OverlapPlan.timed_run): causal order on the streams, the
same output as an untimed call, and a gate too short for the host's enqueue refused."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from engine_cases import TOL, expected as _expected, inputs as _inputs  # noqa: E402
from fo_lib import gemm  # noqa: E402
from fo_lib.comm.loopback import LoopbackCommunicator  # noqa: E402
from fo_lib.engine import OverlapPlan, PlanError  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


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
