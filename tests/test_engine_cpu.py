"""The overlap engine on the CPU: multi-process gloo runs of every primitive (2 ranks under torchrun;
4 and 8 ranks forked from a warm interpreter) against a dense reference, and the checks that reject
bad input before anything runs."""
import os
import re
import subprocess

import numpy as np
import pytest
import torch

from fo_lib import gemm, partition as P
from fo_lib.comm.cpu_loopback import CpuLoopbackCommunicator
from fo_lib.engine import OverlapPlan, PlanError, Routing

from gloo_ranks import run_ranks, torchrun


@pytest.mark.multiproc
@pytest.mark.timeout(600)
# W = 8 (the largest machine the multi-GPU job targets): 7 cases, each primitive and AllReduce variant
# once (8 processes on CI's 2 cores).
@pytest.mark.parametrize("world_size,cases", [(2, 12), (4, 12), (8, 7)])
def test_gloo_all_primitives(world_size, cases):
    # The launcher as users run it once; more ranks forked (torch imported once, not once per rank).
    launch = torchrun if world_size == 2 else run_ranks
    rc, out = launch(world_size, ["-m", "fo_lib.distributed_check", "--device", "cpu", "--cases", str(cases),
                                  "--seed", str(world_size)], timeout=540)
    fails = [line for line in out.splitlines() if "FAIL" in line or "EXC" in line]
    assert rc == 0, "\n".join(fails[:20]) or out[-3000:]
    assert re.search(rf"{cases} cases x {world_size} ranks \(gloo, cpu\): ok", out), out[-2000:]
    assert "Warning" not in out, [line for line in out.splitlines() if "Warning" in line][:5]


class _NoComm:
    """A communicator that must never be called: plans are validated before any collective."""

    link = "none"
    sm_footprint = 0
    copy_engine = False  # optional attributes the engine reads (getattr with a default)
    all_gather_object = None  # one process: no other rank's plan to agree with

    def __init__(self, world_size, rank=0):
        self.world_size, self.rank = world_size, rank

    def __getattr__(self, name):
        raise AssertionError(f"collective {name} called during a check that should have failed first")


CFG = gemm.CONFIGS["64x64x32"]


def test_plan_rejects_bad_input():
    comm = _NoComm(3)
    with pytest.raises(ValueError, match="divisible by the world size 3"):
        OverlapPlan("reduce_scatter", 128, 64, 16, comm, device="cpu", config=CFG, sm_count=2)
    with pytest.raises(PlanError, match="routing covers 2 ranks"):
        OverlapPlan("all_to_all", 128, 64, 16, comm, device="cpu", config=CFG, sm_count=2,
                    routing=Routing.from_destinations([np.zeros(128, int)] * 2))
    with pytest.raises(PlanError, match="needs a Routing"):
        OverlapPlan("all_to_all", 128, 64, 16, comm, device="cpu", config=CFG, sm_count=2)
    with pytest.raises(PlanError, match="multiple of 8"):
        OverlapPlan("all_reduce", 128, 64, 12, comm, device="cpu", config=CFG, sm_count=2)
    with pytest.raises(PlanError, match="primitive"):
        OverlapPlan("broadcast", 128, 64, 16, comm, device="cpu", config=CFG, sm_count=2)
    with pytest.raises(ValueError, match="covers"):
        OverlapPlan("all_reduce", 128, 64, 16, comm, device="cpu", config=CFG, sm_count=2, partition=(1, 1, 1, 1, 1))


def test_plan_checks_the_reduction():
    comm = _NoComm(2)
    kw = dict(device="cpu", config=CFG, sm_count=2)
    copy_engine = _NoComm(2)
    copy_engine.copy_engine = True  # a copy-engine communicator leaves the GEMM all SMs but one
    for prim, extra in (("all_reduce", {}), ("reduce_scatter", {})):
        with pytest.raises(PlanError, match="only the data movement of reduction='post_reorder'"):
            OverlapPlan(prim, 128, 64, 16, copy_engine, **kw, **extra)
    with pytest.raises(PlanError, match="at most 8 copies"):
        OverlapPlan("all_reduce", 128, 64, 16, _NoComm(9), reduction="post_reorder", **kw)
    with pytest.raises(PlanError, match="reduction must be one of"):
        OverlapPlan("all_reduce", 128, 64, 16, comm, reduction="gather", **kw)
    for prim, layout in (("all_to_all", "tiles"), ("all_reduce", "rows")):
        with pytest.raises(PlanError, match="reduction='post_reorder' is for all_reduce or reduce_scatter in the "
                                            "tiles layout"):
            OverlapPlan(prim, 128, 64, 16, comm, layout=layout, reduction="post_reorder", **kw)
    with pytest.raises(PlanError, match="at most 8 copies"):
        OverlapPlan("reduce_scatter", 128, 64, 16, _NoComm(16), reduction="post_reorder", **kw)


def test_run_rejects_mismatched_inputs():
    plan = OverlapPlan("all_reduce", 100, 70, 16, _NoComm(1), device="cpu", config=CFG, sm_count=2)
    a = torch.randn(100, 16).bfloat16()
    b = torch.randn(70, 16).bfloat16()
    with pytest.raises(PlanError, match="shape"):
        plan.run(a[:50], b)
    with pytest.raises(PlanError, match="bfloat16"):
        plan.run(a.half(), b)
    with pytest.raises(PlanError, match="contiguous"):
        plan.run(torch.randn(16, 100).bfloat16().T, b)
    with pytest.raises(PlanError, match="torch.Tensor"):
        plan.run(a.float().numpy(), b)


def test_routing_slots_are_a_permutation_per_receiver():
    rng = np.random.default_rng(0)
    dest = [rng.integers(0, 3, 50) for _ in range(3)]
    r = Routing.from_destinations(dest, shuffle_seed=1)
    for q in range(3):
        got = np.concatenate([x[d == q] for d, x in zip(r.dest, r.dst_index)])
        assert np.array_equal(np.sort(got), np.arange(len(got)))


def test_multi_gpu_job_dry_run():
    """The multi-GPU job prints the torchrun commands it would run on W GPUs (no GPU needed)."""
    proc = subprocess.run(["bash", "scripts/multi_gpu.sh", "--dry-run", "--world", "8", "--quick"],
                          capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert proc.returncode == 0, proc.stderr
    assert "--nproc_per_node 8 -m fo_lib.distributed_check --device cuda" in proc.stdout
    assert "--nproc_per_node 8 scripts/bench/bench_nccl.py --out data/h200x8 --quick" in proc.stdout
    assert "--nproc_per_node 8 scripts/record/record_timeline.py --out data/h200x8" in proc.stdout
    assert "NCCL_NVLS_ENABLE=0" in proc.stdout


def test_partition_callable_gets_the_wave_count():
    seen = []

    def tuner(M, N, K, T):
        seen.append((M, N, K, T))
        return (1,) * T

    plan = OverlapPlan("all_reduce", 300, 200, 16, _NoComm(2), device="cpu", config=CFG, ctas=3, partition=tuner)
    assert seen == [(300, 200, 16, plan.grid.num_waves)]
    assert plan.partition == (1,) * plan.grid.num_waves


def test_per_tile_schedule_counts_waves_over_every_sm():
    """schedule="per_tile": one CTA per tile, waves over all SMs; output as with persistent CTAs."""
    comm = CpuLoopbackCommunicator(1)  # world of one: the AllReduce leaves the buffer as it is
    torch.manual_seed(0)
    a = torch.randn(300, 16).bfloat16()
    b = torch.randn(200, 16).bfloat16()
    per_tile = OverlapPlan("all_reduce", 300, 200, 16, comm, device="cpu", config=CFG, sm_count=4,
                           schedule="per_tile", partition=lambda M, N, K, T: (1,) * T)
    tiles = per_tile.grid.tiles_m * per_tile.grid.tiles_n
    assert per_tile.ctas == tiles and per_tile.grid.num_waves == -(-tiles // 4)
    persistent = OverlapPlan("all_reduce", 300, 200, 16, comm, device="cpu", config=CFG, sm_count=4, ctas=3)
    want = (a.double() @ b.double().T).to(torch.bfloat16)
    assert torch.equal(per_tile.run(a, b), want) and torch.equal(persistent.run(a, b), want)
    with pytest.raises(PlanError, match="schedule"):
        OverlapPlan("all_reduce", 300, 200, 16, comm, device="cpu", config=CFG, schedule="dynamic")


def test_timed_run_needs_cuda():
    plan = OverlapPlan("all_reduce", 128, 64, 16, _NoComm(2), device="cpu", config=CFG, sm_count=2)
    with pytest.raises(PlanError, match="CUDA"):
        plan.timed_run(torch.zeros(128, 16).bfloat16(), torch.zeros(64, 16).bfloat16())


def test_cpu_plans_have_no_comm_graph():
    plan = OverlapPlan("all_reduce", 128, 64, 16, _NoComm(2), device="cpu", config=CFG, sm_count=2)
    assert not plan.comm_graph_active and plan.epoch == 0


@pytest.mark.parametrize("primitive", ["all_reduce", "reduce_scatter", "all_to_all"])
@pytest.mark.parametrize("seed", range(4))
def test_post_stages_cover_the_rows_and_read_only_finished_groups(primitive, seed):
    """Each stage of the staged post-reorder reads only buffer regions of groups whose collectives
    are done, the stages tile the output rows in order, and each stage starts at the first row
    that needs its group (no stage could have started a group earlier)."""
    rng = np.random.default_rng(seed)
    W = int(rng.choice([2, 4]))
    M, N = int(rng.integers(2, 9)) * 64 * W // 2, int(rng.integers(1, 6)) * 64 + int(rng.integers(0, 2)) * 16
    routing = None
    if primitive == "all_to_all":
        routing = Routing.from_destinations([rng.integers(0, W, M) for _ in range(W)], shuffle_seed=seed)
    sms = int(rng.integers(2, 7))
    grid = CFG.grid(M, N, sms)
    cuts = np.sort(rng.choice(np.arange(1, grid.num_waves), size=min(2, grid.num_waves - 1), replace=False))
    part = tuple(np.diff(np.concatenate(([0], cuts, [grid.num_waves]))).tolist())
    comm = type("Ranks", (), dict(world_size=W, rank=int(rng.integers(0, W)), sm_footprint=0))()
    plan = OverlapPlan(primitive, M, N, 16, comm, device="cpu", config=CFG, sm_count=sms, partition=part,
                       routing=routing)
    key = "send" if primitive == "all_reduce" else "recv"
    region = np.full(max(sl[key][1] for sl in plan.slices), -1)
    for g, sl in enumerate(plan.slices):
        region[sl[key][0]:sl[key][1]] = g
    table = np.asarray(plan.post_table)
    stages = plan.post_stages
    assert len(stages) <= 2 and stages[0][1] == 0 and stages[-1][2] == plan.out_rows and stages[-1][0] <= plan.num_groups - 1
    for (g, r0, r1), nxt in zip(stages, stages[1:] + ((None, None, None),)):
        assert r1 > r0 or plan.out_rows == 0
        if nxt[0] is not None:
            assert nxt[1] == r1 and nxt[0] > g
        if r1 > r0:
            reads = region[table[r0:r1]]
            assert reads.min() >= 0 and reads.max() <= g  # only finished groups
            assert region[table[r0]].max() == g or r0 == 0  # the stage's first row needed group g


def test_overlap_check_decides_once_per_shape_and_the_fallback_gives_the_same_result():
    from fo_lib import baselines, partition_tuning
    from fo_lib.modules import RowParallelLinear

    class Fixed(partition_tuning.OverlapCheck):
        def __init__(self, overlap_ms, fallback_ms):
            super().__init__()
            object.__setattr__(self, "t", {"overlap": overlap_ms, "fallback": fallback_ms})
            object.__setattr__(self, "calls", [])

        def timings(self, comm, overlapped, fallback, *, device="cuda"):
            self.calls.append((overlapped(), fallback()))  # both run and agree
            return dict(self.t)

    torch.manual_seed(0)
    x = torch.randn(96, 64).bfloat16()
    outs, seq_calls = {}, []
    real_sequential = baselines.sequential
    for name, check in (("none", None), ("keep", Fixed(1.0, 2.0)), ("fallback", Fixed(2.0, 1.0))):
        torch.manual_seed(1)
        layer = RowParallelLinear(64, 72, CpuLoopbackCommunicator(1), bias=True, device="cpu", check=check,
                                  plan_kw=dict(config=CFG, sm_count=2))
        baselines.sequential = lambda *a, **k: (seq_calls.append(name), real_sequential(*a, **k))[1]
        try:
            outs[name] = [layer(x) for _ in range(3)] + [layer(x[:64])]
        finally:
            baselines.sequential = real_sequential
        if check is not None:
            assert len(check.calls) == 2  # once per shape (96 and 64 rows), not per call
            for overlapped, fallback in check.calls:
                assert torch.allclose(overlapped.float(), fallback.float(), atol=2e-2, rtol=2e-2)
    # The fallback runs on every call of the "fallback" layer (4) plus once per check (2 + 2).
    assert seq_calls.count("fallback") == 6 and seq_calls.count("keep") == 2 and "none" not in seq_calls
    for got in ("keep", "fallback"):
        for a, b in zip(outs["none"], outs[got]):
            assert torch.allclose(a.float(), b.float(), atol=2e-2, rtol=2e-2)
    with pytest.raises(TypeError, match="OverlapCheck"):
        RowParallelLinear(64, 72, CpuLoopbackCommunicator(1), device="cpu", check="yes")


@pytest.mark.parametrize("check", [False, True])
def test_row_parallel_linear_returns_the_pre_norm_sum_with_residual_out(check):
    """Fused add + RMSNorm with ``residual_out``: the module returns ``(normed, pre_norm)``, the
    pre-norm sum in a tensor of its own (the residual is left as it was), on the overlapped path and
    on the check's fallback alike."""
    from fo_lib import baselines, partition_tuning
    from fo_lib.modules import RowParallelLinear
    from fo_lib.postops import PostOps
    from fo_lib.testing import calc_diff

    class Fallback(partition_tuning.OverlapCheck):
        def timings(self, comm, overlapped, fallback, *, device="cuda"):
            overlapped(), fallback()
            return {"overlap": 2.0, "fallback": 1.0}

    ops = PostOps(residual=True, residual_out=True, rmsnorm=True)
    torch.manual_seed(0)
    layer = RowParallelLinear(64, 96, CpuLoopbackCommunicator(2), ops=ops, device="cpu",
                              check=Fallback() if check else None, plan_kw=dict(config=CFG, sm_count=2))
    with torch.no_grad():
        layer.norm_weight.uniform_(0.5, 1.5)
    x, residual = torch.randn(200, 64).bfloat16(), torch.randn(200, 96).bfloat16()
    kept = residual.clone()
    y, pre_norm = layer(x, residual=residual)
    want_pre = 2 * (x.double() @ layer.weight.double().T) + residual.double()
    want = baselines.torch_post_ops(want_pre, PostOps(rmsnorm=True), weight=layer.norm_weight.double())
    assert calc_diff(pre_norm, want_pre) < 1e-2 and calc_diff(y, want) < 1e-2
    assert torch.equal(residual, kept) and pre_norm.data_ptr() != residual.data_ptr()
    assert calc_diff(pre_norm, residual) > 0.5  # the pre-norm sum really holds the projection


def test_overlap_check_times_both_sides_on_the_cpu():
    from fo_lib.partition_tuning import OverlapCheck

    import time
    t = OverlapCheck(rounds=2, inner=2).timings(CpuLoopbackCommunicator(1), lambda: time.sleep(0.004), lambda: None, device="cpu")
    assert set(t) == {"overlap", "fallback"} and t["overlap"] >= 3.5 and 0 <= t["fallback"] < 3.5
    assert not OverlapCheck(rounds=2, inner=1).keep(CpuLoopbackCommunicator(1), lambda: time.sleep(0.003), lambda: None, device="cpu")
    with pytest.raises(ValueError, match="rounds"):
        OverlapCheck(rounds=0)


@pytest.mark.parametrize("seed", range(3))
def test_rows_layout_all_reduce_matches_the_tiles_layout(seed):
    """The rows layout gives the same AllReduce (with and without fused post-ops) as the tiles
    layout, with its groups on whole tile rows; it is refused where it cannot apply."""
    from fo_lib.postops import PostOps

    rng = np.random.default_rng(seed)
    M, N, K = int(rng.integers(65, 400)), int(rng.integers(17, 200)), 8 * int(rng.integers(1, 5))
    sms = int(rng.integers(2, 6))
    cfg = CFG.with_raster("row", int(rng.integers(1, 3)))
    T = cfg.grid(M, N, sms).num_waves
    part = P.from_cuts(rng.random(T - 1) < 0.5)
    a, b = torch.randn(M, K).bfloat16(), torch.randn(N, K).bfloat16()
    ops = PostOps(bias=True, residual=True, rmsnorm=True)
    operands = dict(bias=torch.randn(N).bfloat16(), residual=torch.randn(M, N).bfloat16(),
                    weight=torch.rand(N).bfloat16() + 0.5)
    out = {}
    for layout in ("tiles", "rows"):
        plan = OverlapPlan("all_reduce", M, N, K, CpuLoopbackCommunicator(1), device="cpu", config=cfg, sm_count=sms,
                           partition=part, layout=layout)
        out[layout] = (plan.run(a, b), plan.run(a, b, ops=ops, **operands))
    rows = plan.tables
    assert plan.num_groups == len(rows.row_cuts) - 1 <= len(part)
    assert [sl["send"] for sl in plan.slices] == [(r0 * N, r1 * N) for r0, r1 in zip(rows.row_cuts[:-1], rows.row_cuts[1:])]
    dense = (a.double() @ b.double().T)
    assert torch.allclose(out["rows"][0].double(), dense, atol=0.05, rtol=0.02)
    for x, y in zip(out["tiles"], out["rows"]):
        assert torch.equal(x, y)
    with pytest.raises(PlanError, match="rows layout is for all_reduce"):
        OverlapPlan("reduce_scatter", M, N, K, CpuLoopbackCommunicator(1), device="cpu", config=cfg, sm_count=sms, layout="rows")
    with pytest.raises(PlanError, match="row raster"):
        OverlapPlan("all_reduce", M, N, K, CpuLoopbackCommunicator(1), device="cpu", config=cfg.with_raster("col", 1),
                    sm_count=sms, layout="rows")
    with pytest.raises(PlanError, match="layout must be one of"):
        OverlapPlan("all_reduce", M, N, K, CpuLoopbackCommunicator(1), device="cpu", config=cfg, sm_count=sms, layout="cols")


@pytest.mark.parametrize("reduction", ["collective", "post_reorder"])
def test_one_rank_plan_matches_the_gemm(reduction):
    plan = OverlapPlan("all_reduce", 100, 70, 16, CpuLoopbackCommunicator(1), device="cpu", config=CFG, sm_count=2,
                       reduction=reduction)
    assert plan.sources == 1 and plan.send.numel() == 100 * 70
    a, b = torch.randn(100, 16).bfloat16(), torch.randn(70, 16).bfloat16()
    got = plan.run(a, b).double()
    want = a.double() @ b.double().T
    assert torch.allclose(got, want, rtol=1e-2, atol=1e-2)


def test_group_collective_and_comm_buffer():
    from fo_lib.comm import comm_buffer
    from fo_lib.engine import group_collective

    assert group_collective("all_reduce") == "all_reduce"
    assert group_collective("all_reduce", "post_reorder") == "all_gather"
    assert group_collective("reduce_scatter", "post_reorder") == "all_to_all"
    assert group_collective("reduce_scatter") == "reduce_scatter"

    class Windowed:  # a communicator that places its buffers itself
        def __init__(self):
            self.asked = []

        def empty(self, numel, dtype, device):
            self.asked.append((numel, dtype, str(device)))
            return torch.full((numel,), 7.0, dtype=dtype, device=device)

    comm = Windowed()
    got = comm_buffer(comm, 5, torch.bfloat16, torch.device("cpu"))
    assert comm.asked == [(5, torch.bfloat16, "cpu")] and bool((got == 7).all())
    plain = comm_buffer(object(), 3, torch.float16, "cpu")  # no empty(): a plain tensor
    assert plain.shape == (3,) and plain.dtype == torch.float16


@pytest.mark.parametrize("ctas,cluster", [(130, 2), (131, 1)])
def test_a_cluster_config_runs_clusters_only_on_an_even_cta_count(ctas, cluster):
    """A Hopper config in clusters of 2 needs an even CTA count: on an odd one the plan runs the same
    tiles one CTA at a time (same grid, same waves)."""
    from fo_lib.gemm import sm90
    c2 = sm90.CONFIGS["128x256x64c2"].with_raster("row", 8)
    plan = OverlapPlan("all_reduce", 4096, 4096, 64, _NoComm(2), device="cpu", config=c2, ctas=ctas)
    assert plan.config.cluster == cluster and plan.config.BN == 256 and plan.config.swizzle == 8
    # One CTA per tile: an odd tile count (9 x 7) runs single CTAs, an even one (32 x 16) clusters.
    for M, N, want in ((1100, 1792, 1), (4096, 4096, 2)):
        per_tile = OverlapPlan("all_reduce", M, N, 64, _NoComm(2), device="cpu", config=c2, schedule="per_tile",
                               sm_count=132)
        assert per_tile.config.cluster == want and per_tile.ctas == per_tile.grid.num_tiles
