"""The whole engine in one process on a CPU: the CPU loopback's W identical virtual ranks, every
primitive against a dense float64 reference, the README's CPU example as written, and the errors
that name a failing group."""
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fo_lib import gemm
from fo_lib.comm.cpu_loopback import CpuLoopbackCommunicator
from fo_lib.engine import CollectiveError, OverlapPlan, Routing
from fo_lib.postops import PostOps
from fo_lib.testing import calc_diff

README = Path(__file__).resolve().parents[1] / "README.md"
CFG = gemm.CONFIGS["64x64x32"]


def _inputs(M, N, K, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=gen).bfloat16(), torch.randn(N, K, generator=gen).bfloat16()


@pytest.mark.parametrize("W", [1, 2, 4])
@pytest.mark.parametrize("variant", ["tiles", "rows", "gathered", "reduce_scatter", "rs_gathered", "all_to_all"])
def test_every_primitive_matches_w_identical_ranks(W, variant):
    M, N, K = 200, 136, 24
    comm = CpuLoopbackCommunicator(W, rank=W - 1)
    a, b = _inputs(M, N, K, seed=W)
    C = a.double() @ b.double().T
    kw = dict(device="cpu", config=CFG, sm_count=3)
    if variant in ("tiles", "rows", "gathered"):
        if variant == "rows":
            kw.update(layout="rows", config=CFG.with_raster("row", 1))
        if variant == "gathered":
            kw.update(reduction="post_reorder")
        plan = OverlapPlan("all_reduce", M, N, K, comm, **kw)
        got, want = plan.run(a, b, ops=PostOps(activation="relu")), torch.relu(W * C)
    elif variant in ("reduce_scatter", "rs_gathered"):
        M = 192 * W
        a, b = _inputs(M, N, K, seed=W)
        C = a.double() @ b.double().T
        if variant == "rs_gathered":
            kw.update(reduction="post_reorder")
        plan = OverlapPlan("reduce_scatter", M, N, K, comm, **kw)
        got, want = plan.run(a, b), W * C[torch.from_numpy(plan.owned_rows)]
    else:
        dest = np.random.default_rng(W).integers(0, W, M)
        routing = Routing.from_destinations([dest] * W, shuffle_seed=3)
        plan = OverlapPlan("all_to_all", M, N, K, comm, routing=routing, **kw)
        got = plan.run(a, b)
        want = torch.zeros(got.shape, dtype=torch.float64)
        for src in range(W):  # every virtual rank sends the same rows
            mine = np.flatnonzero(routing.dest[src] == comm.rank)
            want[torch.from_numpy(routing.dst_index[src][mine])] = C[torch.from_numpy(mine)]
    assert plan.num_groups > 1
    assert calc_diff(got.double(), want) < 1e-2


def test_the_readme_cpu_example_runs_as_written():
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    cpu = [b for b in blocks if "CpuLoopbackCommunicator" in b]
    assert len(cpu) == 1, "the README has one CPU example"
    scope: dict = {}
    exec(compile(cpu[0], "README.md (CPU example)", "exec"), scope)  # noqa: S102 - our own README
    plan = scope["plan"]
    assert plan.device == "cpu" and plan.num_groups > 1


def test_a_single_group_plan_says_it_overlaps_nothing_and_repr_is_the_description():
    comm = CpuLoopbackCommunicator(2)
    one = OverlapPlan("all_reduce", 128, 64, 16, comm, device="cpu", config=CFG)  # 132 SMs: one wave
    assert one.num_groups == 1 and "nothing overlaps" in one.describe()
    many = OverlapPlan("all_reduce", 512, 64, 16, comm, device="cpu", config=CFG, sm_count=2)
    assert many.num_groups > 1 and "nothing overlaps" not in many.describe()
    assert repr(many) == f"OverlapPlan({many.describe()})"


def test_a_failing_collective_names_the_plan_the_group_and_the_rank():
    class Broken(CpuLoopbackCommunicator):
        calls = 0

        def all_reduce(self, buf, *, timeout_s=None):
            Broken.calls += 1
            if Broken.calls == 2:
                raise RuntimeError("link down\nsecond line")
            super().all_reduce(buf)

    plan = OverlapPlan("all_reduce", 512, 64, 16, Broken(2, rank=1), device="cpu", config=CFG, sm_count=2,
                       partition=(2, 2), timeout_ms=2500)
    with pytest.raises(CollectiveError) as info:
        plan.run(*_inputs(512, 64, 16))
    msg = str(info.value)
    assert "rank 1 of 2" in msg and "group 2 of 2" in msg and "all_reduce 512x64x16" in msg
    assert "timeout 2.5 s" in msg and "link down" in msg and "second line" not in msg
    assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_cpu_loopback_rejects_bad_world_sizes(bad):
    with pytest.raises(ValueError, match="world_size"):
        CpuLoopbackCommunicator(bad)


def test_group_timeout_is_one_documented_setting(monkeypatch):
    from fo_lib.comm.torch_dist import group_timeout_s

    monkeypatch.delenv("FO_GROUP_TIMEOUT_S", raising=False)
    assert group_timeout_s() == 120
    monkeypatch.setenv("FO_GROUP_TIMEOUT_S", "7.5")
    assert group_timeout_s() == 7.5
    monkeypatch.setenv("FO_GROUP_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="FO_GROUP_TIMEOUT_S"):
        group_timeout_s()
    assert "FO_GROUP_TIMEOUT_S" in README.read_text()


def test_a_dropped_plan_is_freed_at_once_not_by_the_cyclic_gc():
    """No reference cycle through the executor: a dropped plan's buffers (pinned memory and events
    on CUDA) must go when the last reference does, never later from the cyclic GC, which could run
    in the middle of another plan's CUDA-graph capture and invalidate it."""
    import gc
    import weakref

    gc.disable()
    try:
        plan = OverlapPlan("all_reduce", 512, 64, 16, CpuLoopbackCommunicator(2), device="cpu", config=CFG,
                           sm_count=2)
        plan.run(*_inputs(512, 64, 16))
        alive = weakref.ref(plan), weakref.ref(plan.executor)
        del plan
        assert alive[0]() is None and alive[1]() is None
    finally:
        gc.enable()


def test_a_communicator_without_the_timeout_keyword_still_runs():
    """Communicators written to the protocol before it took ``timeout_s`` keep working on the CPU."""
    class OldStyle(CpuLoopbackCommunicator):
        def all_reduce(self, buf):  # no timeout_s
            super().all_reduce(buf)

    plan = OverlapPlan("all_reduce", 512, 64, 16, OldStyle(2), device="cpu", config=CFG, sm_count=2)
    a, b = _inputs(512, 64, 16)
    assert plan.num_groups > 1
    assert calc_diff(plan.run(a, b).double(), 2 * (a.double() @ b.double().T)) < 1e-2


def test_a_plan_whose_collective_failed_refuses_further_calls():
    class Once(CpuLoopbackCommunicator):
        def all_reduce(self, buf, *, timeout_s=None):
            raise RuntimeError("Operation timed out!")

    plan = OverlapPlan("all_reduce", 512, 64, 16, Once(2), device="cpu", config=CFG, sm_count=2)
    with pytest.raises(CollectiveError, match="timeout 10 s"):
        plan.run(*_inputs(512, 64, 16))
    from fo_lib.engine import PlanError
    with pytest.raises(PlanError, match="failed before"):
        plan.run(*_inputs(512, 64, 16))


def test_a_plan_runs_whole_waves_even_from_a_stream_k_config():
    # The wave groups and the overlap model count whole waves: a stream-K tail would reshuffle them.
    from dataclasses import replace

    from fo_lib.gemm import sm90
    cfg = replace(sm90.CONFIGS["128x256x64"], stream_k=True)
    plan = OverlapPlan("all_reduce", 300, 500, 64, CpuLoopbackCommunicator(2), device="cpu", config=cfg,
                       sm_count=4)
    assert plan.config == replace(cfg, stream_k=False)
