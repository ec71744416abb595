"""The Hopper GEMM's stream-K tail (runs, runs of unequal length, split tails) against float64,
repeated exactly with its flags back at zero, compiled in only where a tail pays, and left out of the
signal and the probe (whole waves)."""
import contextlib
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib.gemm import sm90 as gemm_sm90  # noqa: E402
from fo_lib.gemm.sm90 import launch as sm90_launch, stream_k_tail  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402
from gemm_helpers import DTYPES, TOL, gather_index, guarded_out, inputs, ref, signal_tables  # noqa: E402
from sm90_cases import NEEDS_SM90  # noqa: E402

pytestmark = [pytest.mark.gpu, NEEDS_SM90]


# (M, N, K, config, CTAs, split): cut tiles with M/N/K tails, few CTAs, and the LLM shapes the tail
# is for (132 CTAs), in both modes of fo_lib.gemm.stream_k.stream_k_plan: runs (split 1; K of two k-blocks:
# a CTA's run holds a whole tile and the first k-block of the next) and the split tail (2-4 parts).
STREAM_K_CASES = [(200, 300, 72, "128x256x64", 3, 1), (1000, 2000, 4104, "128x256x64", 7, 4),
                  (129, 1030, 520, "128x128x64", 7, 1), (333, 4100, 4040, "128x128x64", 16, 4),
                  (500, 3000, 1000, "128x256x64", 13, 1), (300, 1000, 4104, "128x128x64", 7, 2),
                  (129, 4100, 2000, "128x128x64", 12, 2), (2600, 4096, 14336, "128x256x64", 132, 1),
                  (1536, 3584, 18944, "128x256x64", 132, 3), (2048, 7168, 5120, "128x256x64", 132, 2),
                  # widths between 128 and 256: C rows of an odd chunk count padded, or 24 swizzled ones
                  (500, 3000, 1000, "128x208x64", 13, 1), (300, 1000, 4104, "128x240x64", 7, 4),
                  (129, 4100, 2000, "128x160x64", 12, 3), (1536, 3584, 18944, "128x192x64", 132, 1),
                  (777, 1000, 520, "128x176x64", 5, 2),
                  # an odd count of 8-column blocks (168: the last by stmatrix x2), cooperative and ping-pong
                  (500, 3000, 1000, "128x168x64", 13, 1), (129, 4100, 2000, "128x168x64", 12, 4),
                  (777, 1000, 520, "128x168x64p", 5, 2), (300, 1000, 4104, "128x168x64p", 7, 1),
                  # ping-pong: runs (heads, tails, parked tails on alternating warpgroups) and splits
                  (500, 3000, 1000, "128x176x64p", 13, 1), (129, 4100, 2000, "128x192x64p", 12, 1),
                  (2600, 4096, 14336, "128x192x64p", 132, 2), (777, 1000, 520, "128x176x64p", 5, 2),
                  (1536, 3584, 18944, "128x224x64", 132, 2),
                  # ping-pong consumers that store C themselves (168: an odd last 8-column block)
                  (500, 3000, 1000, "128x176x64pd", 13, 1), (777, 1000, 520, "128x176x64pd", 5, 2),
                  (129, 4100, 2000, "128x168x64pd", 12, 4), (300, 1000, 4104, "128x168x64pd", 7, 1),
                  # a last tile row of at most 64 rows (its second warpgroup skips its MMAs there) in
                  # a split tail (129 x 1030 x 520 and 2600 x 4096 x 14336 above: in runs)
                  (320, 1000, 520, "128x256x64", 5, 2), (320, 1000, 520, "128x208x64", 12, 2),
                  (320, 1000, 520, "128x128x64", 16, 2), (320, 1000, 520, "128x168x64", 12, 2),
                  (5000, 7168, 8192, "128x256x64", 132, 2), (6208, 3072, 4096, "128x256x64", 132, 2)]
# The same short last tile rows in runs of unequal length (sk_bounds), planned as if the idle
# warpgroup's tile cost 0.6 of a whole one (stream_k_tail.IDLE_WARPGROUP_TILE_COST: on the H200 the planner
# weighs it as a whole tile, so they run only here), where the plan splits the tail in 2.
UNEQUAL_RUN_CASES = [(M, N, K, cname, ctas, 1) for M, N, K, cname, ctas, _ in STREAM_K_CASES[-6:]]
IDLE_COST = 0.6


@pytest.fixture
def plan_idle_tiles_at():
    """``plan_idle_tiles_at(cost)``: plan stream-K launches as if a tile whose second warpgroup has no
    rows cost ``cost`` (None: stream_k_tail.IDLE_WARPGROUP_TILE_COST as it is) until the test ends
    (sm90.idle_warpgroup_tile_cost: launches memoized under another plan dropped)."""
    with contextlib.ExitStack() as stack:
        yield lambda cost: stack.enter_context(gemm_sm90.idle_warpgroup_tile_cost(
            stream_k_tail.IDLE_WARPGROUP_TILE_COST if cost is None else cost))


# Each case with the cost its plan is made at (None: the default).
SK_CASES = [(*c, None) for c in STREAM_K_CASES] + [(*c, IDLE_COST) for c in UNEQUAL_RUN_CASES]


def _stream_k_config(cname, M, N, K, ctas, split):
    cfg = replace(gemm_sm90.CONFIGS[cname].with_raster("col", 2), stream_k=True)
    tiles = cfg.grid(M, N, ctas).num_tiles
    sk, got, _ = gemm_sm90.stream_k_schedule(cfg, M, N, K, min(ctas, tiles))
    assert sk > 0 and got == split, f"the case must cut tiles ({'runs' if split == 1 else f'{split} parts'})"
    return cfg


def _unequal_runs(cfg, M, N, K, ctas) -> bool:
    return gemm_sm90.stream_k_schedule(cfg, M, N, K, min(ctas, cfg.grid(M, N, ctas).num_tiles))[2] is not None


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("M,N,K,cname,ctas,split,cost", SK_CASES)
def test_stream_k_tail_matches_float64_and_repeats_exactly(M, N, K, cname, ctas, split, cost, dtype,
                                                           plan_idle_tiles_at):
    plan_idle_tiles_at(cost)  # (and the checks below read this case's launches only)
    cfg = _stream_k_config(cname, M, N, K, ctas, split)
    a, b = inputs(M, N, K, dtype, seed=M + 3 * N + K)
    buf, out, mask = guarded_out(M, N, dtype)
    gemm_sm90.gemm_nt(a, b, out, config=cfg, ctas=ctas)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "unwritten (NaN) elements in the output"
    assert torch.isnan(buf[~mask]).all(), "the kernel wrote outside the output view"
    assert calc_diff(out, ref(a, b)) < TOL[dtype]
    first = out.clone()
    # The same launch again on fresh inputs (the flags must be back at zero), then on the first ones.
    a2, b2 = inputs(M, N, K, dtype, seed=M + 3 * N + K + 1)
    a_saved, b_saved = a.clone(), b.clone()
    a.copy_(a2), b.copy_(b2)
    out.fill_(float("nan"))
    gemm_sm90.gemm_nt(a, b, out, config=cfg, ctas=ctas)
    torch.cuda.synchronize()
    assert calc_diff(out, ref(a, b)) < TOL[dtype]
    a.copy_(a_saved), b.copy_(b_saved)
    gemm_sm90.gemm_nt(a, b, out, config=cfg, ctas=ctas)
    torch.cuda.synchronize()
    assert torch.equal(out, first), "a stream-K launch must be deterministic"
    # The launch was built with a stream-K tail (it keeps a workspace), and its flags are back at zero.
    flags = _stream_k_flags()
    assert flags, "no memoized launch holds a stream-K workspace"
    assert all(int(f.count_nonzero()) == 0 for f in flags), "a finishing CTA left its flag set"
    # Runs of unequal length where the schedule says so: the launch keeps their bounds.
    bounds = [launch._keep[2] for launch in sm90_launch.SM90._memo._launches.values() if launch._keep]
    assert any(x is not None for x in bounds) == _unequal_runs(cfg, M, N, K, ctas)


def _stream_k_flags():
    """The flag buffers of the memoized Hopper launches that have a stream-K workspace (a launch
    keeps ``(partial slots, flags)``; whole-wave launches keep nothing)."""
    return [launch._keep[1] for launch in sm90_launch.SM90._memo._launches.values() if launch._keep]


@pytest.mark.parametrize("M,N,K,cname,ctas,split,cost",
                         SK_CASES[:4] + [c for c in SK_CASES if c[3].endswith("d")])
def test_a_stream_k_config_signals_and_probes_in_whole_waves(M, N, K, cname, ctas, split, cost,
                                                             plan_idle_tiles_at):
    """Only the plain store has a stream-K tail (docs/decisions.md, "Only the plain store takes a
    stream-K tail"): a signal launch of a ``+sk`` config stores what the config stores in whole
    waves, bit for bit, signals each tile once, and builds no stream-K workspace; so does the
    scatter."""
    plan_idle_tiles_at(cost)
    cfg = _stream_k_config(cname, M, N, K, ctas, split)
    whole_cfg = replace(cfg, stream_k=False)
    groups = 3
    a, b = inputs(M, N, K, "bf16", seed=M * N)
    row_offset, tile_group, grid = signal_tables(M, N, cfg, groups, seed=K)
    comm = torch.full((M * N,), float("nan"), dtype=DTYPES["bf16"], device="cuda")
    counters = torch.zeros(groups, dtype=torch.int32, device="cuda")
    ro, tg = torch.from_numpy(row_offset).cuda(), torch.from_numpy(tile_group).cuda()
    memo = sm90_launch.SM90._memo._launches
    before = set(memo)
    for epoch in (1, 2):
        gemm_sm90.gemm_nt_signal(a, b, comm, ro, tg, counters, config=cfg, ctas=ctas)
        whole = gemm_sm90.gemm_nt(a, b, config=whole_cfg, ctas=ctas)
        torch.cuda.synchronize()
        got = comm[torch.from_numpy(gather_index(row_offset, M, N, cfg.BN)).cuda()]
        assert torch.equal(got, whole), "the signal epilogue stored other values than plain whole waves"
        expect = epoch * np.bincount(tile_group, minlength=groups)
        assert counters.cpu().numpy().tolist() == expect.tolist()
    scattered = torch.full_like(comm, float("nan"))  # the scatter (no signal) runs whole waves too
    gemm_sm90.gemm_nt_scatter(a, b, scattered, ro, config=cfg, ctas=ctas)
    torch.cuda.synchronize()
    assert torch.equal(scattered[torch.from_numpy(gather_index(row_offset, M, N, cfg.BN)).cuda()], whole)
    # (the memo is bounded: look at the launches added here, not at a count that eviction can change)
    added = [memo[k] for k in set(memo) - before]
    assert not any(launch._keep for launch in added), "a signal launch built a stream-K workspace"
    assert calc_diff(whole, ref(a, b)) < TOL["bf16"]
    # The probe times waves: it runs the config in whole waves (the same result as plain whole waves).
    out, probe = gemm_sm90.gemm_nt_probe(a, b, config=cfg, ctas=ctas)
    whole = gemm_sm90.gemm_nt(a, b, config=replace(cfg, stream_k=False), ctas=ctas)
    torch.cuda.synchronize()
    assert torch.equal(out, whole)
    p = probe.cpu().numpy()
    assert (p[:, 0] > 0).all() and (p[:, 1] >= p[:, 0]).all(), "every tile stamped once it is stored"
    P = min(ctas, grid.num_tiles)
    assert np.array_equal(p[:, 3], cfg.grid(M, N, P).schedule_index % P), "CTA b runs tiles b, b + P, ..."


@pytest.mark.parametrize("cname,m_cut", [("128x256x64", 2048), ("128x176x64p", 512)])
def test_a_stream_k_launch_runs_the_tail_kernel_only_where_a_tail_pays(cname, m_cut):
    """The stream-K tail is compiled in (kernel_id ``_sk``): a launch whose grid gets no tail (one
    wave) runs the kernel without the tail's code, one that cuts tiles (``m_cut`` rows: a tail split
    in 2) the ``_sk`` kernel; both products match float64."""
    dev = torch.cuda.current_device()
    cfg = _stream_k_config(cname, m_cut, 7168, 512, 132, 2)
    kernel = {sk: gemm_sm90.SM90.kernel(replace(cfg, stream_k=sk), "bf16", "plain", dev) for sk in (False, True)}
    assert kernel[False] is not kernel[True]
    for M, tail in ((256, False), (m_cut, True)):
        a, b = inputs(M, 7168, 512, "bf16", M)
        out = torch.full((M, 7168), float("nan"), dtype=a.dtype, device=a.device)
        launch = gemm_sm90.SM90.prepare(cfg, "bf16", "plain", a, b, out.data_ptr(), 7168, 132)
        assert launch.kernel is kernel[tail], (M, tail)
        launch()
        torch.cuda.synchronize()
        assert calc_diff(out, ref(a, b)) < TOL["bf16"]


def test_the_engine_runs_whole_waves():
    from fo_lib.engine import OverlapPlan
    from fo_lib.comm.loopback import LoopbackCommunicator

    cfg = _stream_k_config("128x256x64", 2600, 4096, 1024, 132, 1)
    plan = OverlapPlan("all_reduce", 2600, 4096, 1024, comm=LoopbackCommunicator(2), config=cfg)
    assert plan.config.stream_k is False and plan.config.BN == cfg.BN
