"""GPU checks of fo_lib.gemm.sm90 (compute capability 9.0 only): numerics against float64 on fresh
random inputs with poisoned outputs and guard frames, the signal epilogue's row tables (random and
fo_lib.reorder's tile / subtile / subtoken layouts) and exact counters over back-to-back epochs, a
counter-gated reader on a second stream, and the probe's timestamps against the wave model."""
import contextlib
import json
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import counting, gemm, reorder  # noqa: E402
from fo_lib.gemm import sm90 as gemm_sm90  # noqa: E402
from fo_lib.gemm.sm90 import launch as sm90_launch, stream_k_tail  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402
from fo_lib.tiling import TileGrid  # noqa: E402
from gemm_helpers import (DTYPES, SHAPES, TOL, check_signal_rejects_bad_tables, gather_index,  # noqa: E402
                          guarded_out, inputs, ref, signal_tables)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not gemm_sm90.is_supported(), reason="needs a compute capability 9.0 GPU")]

CONFIG_NAMES = list(gemm_sm90.CONFIGS)
# K tails inside the last 64-wide k-block and K below one k-block (TMA zero fill), on top of SHAPES.
SHAPES_SM90 = SHAPES + [(129, 130, 8), (200, 300, 72), (1000, 777, 4104), (333, 4100, 4040)]
SECOND = 1_000_000_000


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("cname", CONFIG_NAMES)
@pytest.mark.parametrize("M,N,K", SHAPES_SM90)
def test_gemm_plain(M, N, K, cname, dtype):
    cfg = gemm_sm90.CONFIGS[cname].with_raster("row", 4)
    a, b = inputs(M, N, K, dtype, seed=M * 7 + N * 13 + K + 1)
    buf, out, mask = guarded_out(M, N, dtype)
    gemm_sm90.gemm_nt(a, b, out, config=cfg)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "unwritten (NaN) elements in the output"
    assert torch.isnan(buf[~mask]).all(), "the kernel wrote outside the output view"
    err = calc_diff(out, ref(a, b))
    assert err < TOL[dtype], f"rel. error {err:.3g}"


@pytest.mark.parametrize("M,N,K", [(4096, 4096, 4096), (1000, 3000, 1000), (77, 9000, 264)])
def test_gemm_matches_torch(M, N, K):
    """Same order of magnitude of error as cuBLAS against float64 (not just under a loose bound)."""
    a, b = inputs(M, N, K, "bf16", seed=17)
    r = ref(a, b)
    ours = calc_diff(gemm_sm90.gemm_nt(a, b), r)
    theirs = calc_diff(torch.matmul(a, b.T), r)
    assert ours < 2 * theirs + 1e-4, (ours, theirs)


def test_gemm_operand_views():
    """Operands that are row slices / column slices of bigger tensors (row stride != K), unaligned M."""
    base_a = torch.randn(700, 1040, device="cuda").bfloat16()
    base_b = torch.randn(530, 1040, device="cuda").bfloat16()
    a, b = base_a[3:650, 8:1000], base_b[1:517, 16:1008]  # K = 992, strides 1040
    out = gemm_sm90.gemm_nt(a, b, config=gemm_sm90.CONFIGS["128x128x64"])
    assert calc_diff(out, ref(a, b)) < TOL["bf16"]


@pytest.mark.parametrize("M,N,K,ctas,order,swizzle", [
    (1000, 3000, 256, None, "row", 1), (1000, 3000, 256, 7, "col", 3), (4096, 4096, 512, 132, "row", 8),
    (77, 9000, 64, 5, "col", 1), (3333, 333, 96, 1, "row", 2)])
def test_gemm_default_and_ctas(M, N, K, ctas, order, swizzle):
    a, b = inputs(M, N, K, "bf16", seed=1)
    out = gemm_sm90.gemm_nt(a, b, ctas=ctas)  # default config
    assert calc_diff(out, ref(a, b)) < TOL["bf16"]
    # Whole tiles (no stream-K tail, which cuts whichever tiles the raster puts last): every tile
    # sums its k-blocks in one order, so the raster and the CTA count cannot change a bit.
    # (A cluster pick runs its tiles one CTA at a time on an odd CTA count, as the default call does.)
    whole = replace(gemm_sm90.default_config(M, N, K, gemm.sm_count()), stream_k=False).for_ctas(
        ctas or gemm.sm_count())
    out1 = gemm_sm90.gemm_nt(a, b, config=whole, ctas=ctas)
    out2 = gemm_sm90.gemm_nt(a, b, config=whole.with_raster(order, swizzle), ctas=ctas)
    assert torch.equal(out1, out2), "raster/ctas must not change the result (same k order per tile)"


# --- clusters of 2 (B or A shared by TMA multicast) ----------------------------------------------
# Odd tile counts (a phantom unit), odd tile rows (edge bands whose pairs share A or nothing), N tails
# inside and past the first half of B (a half box wholly out of bounds), grids smaller than ctas.
CLUSTER_SHAPES = [(1100, 1792, 520), (300, 130, 72), (129, 100, 8), (2048, 4096, 1024), (777, 1000, 4104)]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("tile,twin", [("128x256x64", "128x256x64c2"), ("128x128x64", "128x128x64c2"),
                                       ("128x176x64", "128x176x64c2"), ("128x208x64", "128x208x64c2"),
                                       ("128x176x64", "128x176x64p"), ("128x176x64", "128x176x64c2p"),
                                       ("128x128x64", "128x128x64c2p"), ("128x256x64", "128x256x64d"),
                                       ("128x224x64", "128x224x64c2d"), ("128x176x64", "128x176x64pd"),
                                       ("128x168x64", "128x168x64pd")])
@pytest.mark.parametrize("M,N,K", CLUSTER_SHAPES)
def test_cluster_equals_single_cta_bitwise(M, N, K, tile, twin, dtype):
    """The same tiles with and without clusters (or ping-pong consumers, or direct C) sum the same k-blocks in the
    same order: equal bit for bit, over rasters that pair tiles down a tile column (row 2; row 3 all but across bands) or
    only on a one-column grid (col 4, row 1), and CTA counts down to one cluster; and within
    tolerance of float64."""
    a, b = inputs(M, N, K, dtype, seed=M + N + K)
    want = ref(a, b)
    for order, swizzle in (("row", 2), ("row", 3), ("col", 4), ("row", 1)):
        for ctas in (2, 6, 132):
            c1 = gemm_sm90.CONFIGS[tile].with_raster(order, swizzle)
            c2 = gemm_sm90.CONFIGS[twin].with_raster(order, swizzle)
            buf, out, mask = guarded_out(M, N, dtype)
            gemm_sm90.gemm_nt(a, b, out, config=c2, ctas=ctas)
            torch.cuda.synchronize()
            assert not torch.isnan(out).any(), f"unwritten elements ({order}{swizzle}, {ctas} CTAs)"
            assert torch.isnan(buf[~mask]).all(), "the kernel wrote outside the output view"
            assert calc_diff(out, want) < TOL[dtype]
            single = gemm_sm90.gemm_nt(a, b, config=c1, ctas=ctas)
            assert torch.equal(out, single), f"cluster != single CTA ({order}{swizzle}, {ctas} CTAs)"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("M,N,K", CLUSTER_SHAPES)
def test_cooperative_direct_c_at_an_odd_width_equals_the_staged_tile(M, N, K, dtype):
    """Direct C at 168 wide with cooperative consumers (valid, not a named config): its last 8-column
    block by stmatrix x2 in the warp buffers, bit for bit the 168-wide tile staged whole, and no write
    outside the output."""
    a, b = inputs(M, N, K, dtype, seed=M + N + K)
    staged = gemm_sm90.CONFIGS["128x168x64"].with_raster("col", 4)
    from fo_lib.gemm.sm90.configs import max_stages
    direct = replace(staged, stages=max_stages(168, direct_c=True), direct_c=True).validate()
    for ctas in (3, 132):
        buf, out, mask = guarded_out(M, N, dtype)
        gemm_sm90.gemm_nt(a, b, out, config=direct, ctas=ctas)
        torch.cuda.synchronize()
        assert not torch.isnan(out).any() and torch.isnan(buf[~mask]).all()
        assert torch.equal(out, gemm_sm90.gemm_nt(a, b, config=staged, ctas=ctas))


def test_cluster_needs_an_even_cta_count():
    a, b = inputs(256, 512, 64, "bf16", seed=5)
    with pytest.raises(gemm.GemmError, match="multiple of 2"):
        gemm_sm90.gemm_nt(a, b, config=gemm_sm90.CONFIGS["128x256x64c2"], ctas=7)


def test_cluster_capacity_is_known():
    """The driver's count of resident clusters of 2: at least one, at most one per pair of SMs."""
    clustered = [c for c in gemm_sm90.CONFIGS.values() if c.cluster == 2]
    assert clustered
    for cfg in clustered:
        assert 1 <= gemm_sm90.cluster_capacity(cfg) <= gemm.sm_count() // 2


def test_a_cluster_default_runs_on_an_odd_cta_count(monkeypatch):
    """The default pick is made for the SM count (even: clusters allowed); where it is a cluster
    config, an odd ``ctas`` runs the same tiles one CTA at a time instead of refusing the call."""
    picked = gemm_sm90.CONFIGS["128x128x64c2"].with_raster("row", 2)
    monkeypatch.setattr(sm90_launch, "default_config", lambda *args, **kw: picked)  # whatever the table says
    M, N, K = 1100, 1792, 5120
    a, b = inputs(M, N, K, "bf16", seed=9)
    assert gemm_sm90.config_for(a, b, ctas=131) == picked.for_ctas(131)
    assert picked.for_ctas(131).cluster == 1 and picked.for_ctas(131).BN == 128
    out = gemm_sm90.gemm_nt(a, b, ctas=131)
    assert calc_diff(out, ref(a, b)) < TOL["bf16"]


def _tuning_setup(tmp_path, monkeypatch):
    """A fresh tuning cache, and the H200's tile table to shortlist from on any sm_90 GPU (autotuning
    needs a table; which GPU recorded it does not matter to these checks)."""
    from fo_lib import provenance
    from fo_lib.gemm import config_tuning, tile_table
    monkeypatch.setenv(tile_table.ENV_VAR, str(provenance.DATA_DIR / "h200" / tile_table.TABLE_NAME))
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path))
    config_tuning.forget()


def test_autotune_times_a_shape_once_and_remembers_it(tmp_path, monkeypatch):
    """The first plain call of a shape times the model's shortlist and runs the winner (checked
    against float64); the cache file holds it, another process reads it back without timing, and
    FO_SM90_AUTOTUNE=0 runs the model's pick."""
    from fo_lib.gemm import config_tuning
    _tuning_setup(tmp_path, monkeypatch)
    M, N, K = 2048, 7168, 1024
    a, b = inputs(M, N, K, "bf16", seed=23)
    buf, out, mask = guarded_out(M, N, "bf16")
    gemm_sm90.gemm_nt(a, b, out)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "unwritten (NaN) elements in the output"
    assert torch.isnan(buf[~mask]).all(), "the kernel wrote outside the output view"
    assert calc_diff(out, ref(a, b)) < TOL["bf16"]
    (entry,) = json.loads((tmp_path / config_tuning.FILE_NAME).read_text()).values()
    cfg = gemm_sm90.config_for(a, b)
    label, ms = gemm_sm90.config_label(cfg), entry["ms"]
    assert len(ms) >= 2 and label in ms and entry["model"] in ms and all(v > 0 for v in ms.values())
    assert ms[label] == min(ms.values()) or label == entry["model"]
    config_tuning.forget()  # as another process: the file, no timing
    monkeypatch.setattr(config_tuning, "time_launches", lambda *a, **k: pytest.fail("timed a remembered shape"))
    assert gemm_sm90.config_for(a, b) == cfg
    monkeypatch.setenv(config_tuning.ENV_VAR, "0")
    assert gemm_sm90.config_for(a, b) == gemm_sm90.default_config(M, N, K, gemm.sm_count())
    config_tuning.forget()


def test_a_one_wave_tuning_keeps_a_cluster_unless_a_single_cta_is_well_ahead(tmp_path, monkeypatch):
    """On a one-wave grid a single-CTA candidate's time counts config_tuning.ONE_WAVE_SINGLE_CTA more:
    timings with every single CTA 1 % ahead of every cluster pick a cluster, 5 % ahead a single CTA."""
    from fo_lib.gemm import config_tuning
    _tuning_setup(tmp_path, monkeypatch)
    M, N, K = 1100, 1792, 512  # 9 x 14 tiles of 128 x 128: one wave
    a, b = inputs(M, N, K, "bf16", seed=29)
    for lead, cluster in ((0.01, 2), (0.05, 1)):
        config_tuning.clear()
        timed = []

        def fake(runs, lead=lead, **kw):
            timed.append(list(runs))
            return {label: 1.0 if "c2" in label else 1.0 - lead for label in runs}

        monkeypatch.setattr(config_tuning, "time_launches", fake)
        assert gemm_sm90.config_for(a, b).cluster == cluster
        assert any("c2" in label for label in timed[0]) and any("c2" not in label for label in timed[0])
    config_tuning.forget()


def test_autotune_inside_a_graph_capture_and_after_a_failed_tuning(tmp_path, monkeypatch):
    """Under a CUDA-graph capture a tuned shape runs its winner and an untuned one the model's pick,
    with nothing timed; a tuning that fails warns once, runs the model's pick and is not retried."""
    from fo_lib.gemm import config_tuning
    _tuning_setup(tmp_path, monkeypatch)
    a, b = inputs(1536, 3584, 2048, "bf16", seed=29)
    tuned = gemm_sm90.config_for(a, b)  # eager: timed and remembered
    c, d = inputs(1024, 8192, 1024, "bf16", seed=31)  # never tuned
    model = gemm_sm90.default_config(1024, 8192, 1024, gemm.sm_count())
    monkeypatch.setattr(config_tuning, "time_launches", lambda *a, **k: pytest.fail("timed inside a capture"))
    with torch.cuda.graph(torch.cuda.CUDAGraph()):  # (nothing is launched: an empty graph)
        got = gemm_sm90.config_for(a, b), gemm_sm90.config_for(c, d)
    assert got == (tuned, model)
    calls = []

    def broken(*args, **kw):
        calls.append(1)
        raise RuntimeError("out of memory (test)")

    monkeypatch.setattr(config_tuning, "time_launches", broken)
    with pytest.warns(RuntimeWarning, match="autotuning 1024 x 8192 x 1024 failed"):
        out = gemm_sm90.gemm_nt(c, d)
    assert calc_diff(out, ref(c, d)) < TOL["bf16"]
    assert gemm_sm90.config_for(c, d) == model and calls == [1]
    config_tuning.forget()


def test_tuning_runs_rotate_over_operand_copies_in_eager_calls_and_graphs():
    """Autotuning's timed calls: call i of a config reads operand set i % n (the caller's, then
    copies in memory of their own) and writes output i % n, eagerly and in the graphs
    config_tuning.time_launches replays; the caller's operands are only read."""
    from fo_lib.gemm import config_tuning
    M, N, K = 300, 520, 136  # small: as many copies as a graph's calls use
    a, b = inputs(M, N, K, "bf16", seed=37)
    want, a0, b0 = ref(a, b), a.clone(), b.clone()
    cfgs = [gemm_sm90.CONFIGS[n] for n in ("128x256x64", "128x128x64c2p", "128x240x64d")]
    runs = gemm_sm90.tuning_runs(cfgs, "bf16", a, b, gemm.sm_count() // 2 * 2)  # (clusters of 2)
    assert list(runs) == [gemm_sm90.config_label(c) for c in cfgs]
    r0 = runs[gemm_sm90.config_label(cfgs[0])]
    n = len(r0.sets)
    assert n == config_tuning.REPS and r0.sets[0][0] is a and r0.sets[0][1] is b
    ptrs = [t.data_ptr() for x, y in r0.sets for t in (x, y)] + [o.data_ptr() for o in r0.outs]
    assert len(set(ptrs)) == len(ptrs), "operand sets or outputs share memory"
    for k in range(1, n):  # set k holds (k + 1) a: its output must be (k + 1) a b^T
        r0.sets[k][0].mul_(k + 1)
    for label, r in runs.items():
        assert r.sets is r0.sets and r.outs is r0.outs  # the configs share them
        for o in r0.outs:
            o.fill_(float("nan"))
        for i in range(n):
            r(i)
        torch.cuda.synchronize()
        for k, o in enumerate(r0.outs):
            assert calc_diff(o, want * (k + 1)) < TOL["bf16"], (label, k)
    for o in r0.outs:
        o.fill_(float("nan"))
    ms = config_tuning.time_launches(runs, rounds=2)  # graphs of REPS calls: every output written again
    assert set(ms) == set(runs) and all(v > 0 for v in ms.values())
    for k, o in enumerate(r0.outs):
        assert calc_diff(o, want * (k + 1)) < TOL["bf16"], k
    assert torch.equal(a, a0) and torch.equal(b, b0)


# --- stream-K tail -------------------------------------------------------------------------------
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
                  # consumers that store C themselves (direct_c): runs and splits
                  (500, 3000, 1000, "128x256x64d", 13, 1), (300, 1000, 4104, "128x240x64d", 7, 4),
                  (1536, 3584, 18944, "128x224x64d", 132, 2),
                  # ping-pong consumers that store C themselves (168: an odd last 8-column block)
                  (500, 3000, 1000, "128x176x64pd", 13, 1), (777, 1000, 520, "128x176x64pd", 5, 2),
                  (129, 4100, 2000, "128x168x64pd", 12, 4), (300, 1000, 4104, "128x168x64pd", 7, 1),
                  # a last tile row of at most 64 rows (its second warpgroup skips its MMAs there) in
                  # a split tail (129 x 1030 x 520 and 2600 x 4096 x 14336 above: in runs)
                  (320, 1000, 520, "128x256x64d", 5, 2), (320, 1000, 520, "128x208x64", 12, 2),
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
def test_stream_k_tail_signals_each_tile_once(M, N, K, cname, ctas, split, cost, plan_idle_tiles_at):
    plan_idle_tiles_at(cost)
    cfg = _stream_k_config(cname, M, N, K, ctas, split)
    groups = 3
    a, b = inputs(M, N, K, "bf16", seed=M * N)
    row_offset, tile_group, grid = signal_tables(M, N, cfg, groups, seed=K)
    comm = torch.full((M * N,), float("nan"), dtype=DTYPES["bf16"], device="cuda")
    counters = torch.zeros(groups, dtype=torch.int32, device="cuda")
    ro, tg = torch.from_numpy(row_offset).cuda(), torch.from_numpy(tile_group).cuda()
    for epoch in (1, 2):
        gemm_sm90.gemm_nt_signal(a, b, comm, ro, tg, counters, config=cfg, ctas=ctas)
        plain = gemm_sm90.gemm_nt(a, b, config=cfg, ctas=ctas)
        torch.cuda.synchronize()
        got = comm[torch.from_numpy(gather_index(row_offset, M, N, cfg.BN)).cuda()]
        assert torch.equal(got, plain), "the signal epilogue stored other values than plain"
        expect = epoch * np.bincount(tile_group, minlength=groups)
        assert counters.cpu().numpy().tolist() == expect.tolist()
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


def test_gemm_on_side_stream():
    a, b = inputs(1024, 1024, 1024, "f16", seed=2)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = gemm_sm90.gemm_nt(a, b)
    s.synchronize()
    assert calc_diff(out, ref(a, b)) < TOL["f16"]
    out2 = gemm_sm90.gemm_nt(a, b, stream=s)
    s.synchronize()
    assert torch.equal(out, out2)


def test_gemm_rejects_bad_inputs():
    a, b = inputs(64, 64, 64, "bf16", seed=3)
    with pytest.raises(gemm.GemmError, match="bfloat16 and float16"):
        gemm_sm90.gemm_nt(a.float(), b.float())
    with pytest.raises(gemm.GemmError, match="K mismatch"):
        gemm_sm90.gemm_nt(a, b[:, :32])
    with pytest.raises(gemm.GemmError, match="multiple of 8"):
        gemm_sm90.gemm_nt(a[:, :60], b[:, :60])
    with pytest.raises(gemm.GemmError, match="unit stride"):
        gemm_sm90.gemm_nt(a.T, b)
    with pytest.raises(gemm.GemmError, match="aligned"):
        gemm_sm90.gemm_nt(a.flatten()[1:4097 - 64].view(63, 64), b)
    with pytest.raises(gemm.GemmError, match="Sm90Config"):
        gemm_sm90.gemm_nt(a, b, config=gemm.CONFIGS["128x256x64"])
    with pytest.raises(gemm.GemmError, match="must be"):
        gemm_sm90.gemm_nt(a, b, torch.empty(64, 65, dtype=a.dtype, device="cuda"))


# --- signal epilogue -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("cname", CONFIG_NAMES)
@pytest.mark.parametrize("M,N,K,groups", [(1, 8, 8, 1), (100, 300, 64, 3), (1000, 2000, 264, 5),
                                          (2048, 4096, 512, 8), (257, 129, 40, 2), (77, 1000, 16, 4)])
@pytest.mark.parametrize("epilogue", ["signal", "scatter", "signal_rows"])
def test_gemm_signal(M, N, K, groups, cname, dtype, epilogue):
    cfg = gemm_sm90.CONFIGS[cname].with_raster("col", 2)
    a, b = inputs(M, N, K, dtype, seed=M + N + K)
    row_offset, tile_group, grid = signal_tables(M, N, cfg, groups, seed=M * N)
    guard = 64
    comm = torch.full((M * N + guard,), float("nan"), dtype=DTYPES[dtype], device="cuda")
    ro = torch.from_numpy(row_offset).cuda()
    tg = torch.from_numpy(tile_group).cuda()
    counters = torch.zeros(groups, dtype=torch.int32, device="cuda")
    if epilogue == "signal_rows":  # C row-major into comm, no table: the rows layout's store
        row_offset = np.arange(M, dtype=np.int64)[:, None] * N + np.arange(grid.tiles_n)[None, :] * cfg.BN
        gemm_sm90.gemm_nt_signal(a, b, comm, None, tg, counters, config=cfg)
    elif epilogue == "signal":
        gemm_sm90.gemm_nt_signal(a, b, comm, ro, tg, counters, config=cfg)
    else:
        gemm_sm90.gemm_nt_scatter(a, b, comm, ro, config=cfg)
    plain = gemm_sm90.gemm_nt(a, b, config=cfg)
    torch.cuda.synchronize()
    assert not torch.isnan(comm[:M * N]).any(), "comm_buf elements left unwritten"
    assert torch.isnan(comm[M * N:]).all(), "comm_buf written past the table's range"
    got = comm[torch.from_numpy(gather_index(row_offset, M, N, cfg.BN)).cuda()]
    assert torch.equal(got, plain), "signal epilogue stored different values / places than plain"
    assert calc_diff(got, ref(a, b)) < TOL[dtype]
    expect = np.bincount(tile_group, minlength=groups) if epilogue != "scatter" else np.zeros(groups)
    assert counters.cpu().numpy().tolist() == expect.tolist()


def _plan(mode, grid, part, M, rng):
    if mode == "tile":
        return reorder.tile_reorder(grid, part)
    if mode.startswith("subtile"):
        return reorder.subtile_reorder(grid, part, 8 if mode == "subtile8" else 4)
    W = 3
    dest = [rng.integers(0, W, M) for _ in range(W)]
    idx = [np.zeros(M, dtype=np.int64) for _ in range(W)]
    cnt = np.zeros(W, dtype=np.int64)
    for s_ in range(W):
        for i in range(M):
            idx[s_][i] = cnt[dest[s_][i]]
            cnt[dest[s_][i]] += 1
    return reorder.subtoken_reorder(grid, part, dest, idx, 1)


@pytest.mark.parametrize("cname", CONFIG_NAMES)
@pytest.mark.parametrize("mode,store", [("tile", "table"), ("tile", "places"), ("subtile", "table"),
                                        ("subtile", "places"), ("subtile8", "places"), ("subtoken", "table")])
@pytest.mark.parametrize("M,N,K", [(1000, 1100, 64), (4096, 2048, 128), (300, 4096, 32), (777, 1000, 200)])
def test_gemm_signal_with_reorder_tables(mode, store, M, N, K, cname):
    """The kernel stores exactly where fo_lib.reorder's tables say (the NumPy pre-reorder), through
    the row table or (tile blocks) through the tiles' places."""
    cfg = gemm_sm90.CONFIGS[cname].with_raster("row", 4)
    ctas = 40
    grid = cfg.grid(M, N, ctas)
    T = grid.num_waves
    part = tuple([1] * min(T, 3) + ([T - 3] if T > 3 else []))
    plan = _plan(mode, grid, part, M, np.random.default_rng(M + N))
    a, b = inputs(M, N, K, "bf16", seed=M)
    n = plan.buffer_elements
    comm = torch.full((n,), float("nan"), dtype=torch.bfloat16, device="cuda")
    counters = torch.zeros(len(part), dtype=torch.int32, device="cuda")
    tables = (dict(row_offset=torch.from_numpy(plan.row_offset).cuda()) if store == "table" else
              dict(row_offset=None, tile_place=torch.from_numpy(plan.tile_place).cuda()))
    gemm_sm90.gemm_nt_signal(a, b, comm, tile_group=torch.from_numpy(plan.tile_group).cuda(),
                             group_counter=counters, config=cfg, ctas=ctas, **tables)
    plain = gemm_sm90.gemm_nt(a, b, config=cfg).float().cpu().numpy()
    expect = reorder.pre_reorder(plain, plan.row_offset, n, cfg.BN)
    got = comm.float().cpu().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expect))
    np.testing.assert_array_equal(got[~np.isnan(got)], expect[~np.isnan(expect)])
    assert counters.cpu().numpy().tolist() == plan.group_tiles.tolist()


def test_gemm_signal_counters_accumulate():
    """120 back-to-back calls: every counter = calls x its group's tiles (epochs, never reset)."""
    cfg = gemm_sm90.CONFIGS["128x128x64"].with_raster("row", 2)
    M, N, K, groups, calls = 1000, 1500, 128, 6, 120
    a, b = inputs(M, N, K, "bf16", seed=5)
    row_offset, tile_group, grid = signal_tables(M, N, cfg, groups, seed=6)
    comm = torch.empty(M * N, dtype=torch.bfloat16, device="cuda")
    ro, tg = torch.from_numpy(row_offset).cuda(), torch.from_numpy(tile_group).cuda()
    counters = torch.zeros(groups, dtype=torch.uint32, device="cuda")
    for _ in range(calls):
        gemm_sm90.gemm_nt_signal(a, b, comm, ro, tg, counters, config=cfg, ctas=50)
    torch.cuda.synchronize()
    expect = calls * np.bincount(tile_group, minlength=groups)
    assert counters.cpu().to(torch.int64).numpy().tolist() == expect.tolist()


@pytest.mark.parametrize("cname", CONFIG_NAMES)
def test_gemm_signal_gates_a_reader_on_another_stream(cname):
    """The protocol end to end: a second stream waits for each group's epoch target, then copies that
    group's slice while the GEMM is still running later groups. Calls alternate between two input
    sets (so a stale slice is caught) and two buffers; every copied slice must hold its call's data."""
    cfg = gemm_sm90.CONFIGS[cname].with_raster("row", 2)
    M, N, K, calls = 2048, 4096, 1024, 8
    ctas = 33 + (cfg.cluster == 2)  # clusters come in pairs
    grid = cfg.grid(M, N, ctas)
    plan = reorder.tile_reorder(grid, (1,) * grid.num_waves)
    sets = [inputs(M, N, K, "bf16", seed=40 + i) for i in range(2)]
    ro = torch.from_numpy(plan.row_offset).cuda()
    tg = torch.from_numpy(plan.tile_group).cuda()
    n = plan.buffer_elements
    expect = [reorder.pre_reorder(gemm_sm90.gemm_nt(a, b, config=cfg).float().cpu().numpy(), plan.row_offset, n,
                                  cfg.BN) for a, b in sets]
    bufs = [torch.empty(n, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    snaps = [torch.full((n,), float("nan"), dtype=torch.bfloat16, device="cuda") for _ in range(calls)]
    counters = torch.zeros(plan.num_groups, dtype=torch.int32, device="cuda")
    err = torch.zeros(1, dtype=torch.int32, device="cuda")
    # Warm-up: load the GEMM and wait kernels before any wait spins (lazy module loading would deadlock).
    warm = torch.zeros(plan.num_groups, dtype=torch.int32, device="cuda")
    gemm_sm90.gemm_nt_signal(*sets[0], bufs[0], ro, tg, warm, config=cfg, ctas=ctas)
    counting.wait_counter(warm, 0, 1, err, SECOND)
    torch.cuda.synchronize()
    # Two non-blocking side streams (never the legacy default stream, which would serialize them).
    compute, comm = torch.cuda.Stream(), torch.cuda.Stream(priority=-1)
    targets = counting.EpochTargets(plan.group_tiles)
    done = []
    for e in range(calls):
        if e >= 2:
            compute.wait_event(done[e - 2])  # buffer e % 2 was read by call e - 2's copies
        a, b = sets[e % 2]
        gemm_sm90.gemm_nt_signal(a, b, bufs[e % 2], ro, tg, counters, config=cfg, ctas=ctas, stream=compute)
        with torch.cuda.stream(comm):
            for g, target in enumerate(targets.next()):
                counting.wait_counter(counters, g, target, err, 20 * SECOND, stream=comm)
                s0, s1 = (int(v) for v in plan.group_slices[g])
                snaps[e][s0:s1].copy_(bufs[e % 2][s0:s1])
            ev = torch.cuda.Event()
            ev.record(comm)
            done.append(ev)
    counting.check_wait_error(err, comm)
    torch.cuda.synchronize()
    for e in range(calls):
        got = snaps[e].float().cpu().numpy()
        np.testing.assert_array_equal(got, expect[e % 2], err_msg=f"call {e}")
    assert counters.cpu().numpy().tolist() == (calls * plan.group_tiles).tolist()


def test_gemm_signal_rejects_bad_tables():
    check_signal_rejects_bad_tables(gemm_sm90.SM90, gemm_sm90.CONFIGS["128x128x64"])


# --- probe: timing, waves, raster ----------------------------------------------------------------
@pytest.mark.parametrize("cname,M,N,K,ctas,order,swizzle", [
    ("128x256x64", 4096, 4096, 1024, None, "row", 1),
    ("128x256x64", 4096, 4096, 1024, 132, "row", 8),
    ("128x128x64", 3000, 2000, 512, 40, "col", 3),
    ("128x128x64", 1000, 1000, 256, 17, "col", 1),
    ("128x256x64", 2000, 3000, 512, 64, "row", 5),
    ("128x256x64", 1024, 8192, 512, 100, "col", 8),
    ("128x256x64c2", 1100, 1792, 256, 12, "row", 4),  # 63 tiles: a phantom unit (on CTA 63 % 12)
    ("128x128x64c2", 2000, 3000, 512, 64, "row", 3),
    # direct C: the consumers store, the store warps stamp the end (a partial last 64-column block)
    ("128x240x64d", 2000, 3000, 512, 64, "row", 5),
    ("128x256x64c2d", 1100, 1792, 256, 12, "row", 4),
    ("128x168x64pd", 2000, 3000, 512, 64, "col", 3),
])
def test_gemm_probe_waves_and_raster(cname, M, N, K, ctas, order, swizzle):
    cfg = gemm_sm90.CONFIGS[cname].with_raster(order, swizzle)
    a, b = inputs(M, N, K, "f16", seed=11)
    out, probe = gemm_sm90.gemm_nt_probe(a, b, config=cfg, ctas=ctas)
    torch.cuda.synchronize()
    assert calc_diff(out, ref(a, b)) < TOL["f16"]
    sms = gemm.sm_count()
    P = sms if ctas is None else ctas
    grid = TileGrid.with_ctas(M, N, P, BM=cfg.BM, BN=cfg.BN, order=order, swizzle=swizzle)
    assert grid == cfg.grid(M, N, P)
    p = probe.cpu().numpy()
    start, end, smid, cta = p[:, 0], p[:, 1], p[:, 2], p[:, 3]
    assert (start > 0).all() and (end >= start).all()
    assert (smid < sms).all() and (smid >= 0).all()
    # Raster: CTA b ran exactly the tiles at schedule indices b, b + P, ...
    s_idx = grid.schedule_index
    assert np.array_equal(cta, s_idx % P)
    # Waves: a CTA starts its tiles in schedule order and finishes them in that order; tile j of a CTA
    # is wave j. (A tile's end may pass the next tile's start: the store warps finish tile j while
    # the consumers already compute tile j + 1.)
    wave = np.empty(grid.num_tiles, dtype=np.int64)
    for b_ in range(min(P, grid.num_tiles)):
        tiles = np.flatnonzero(cta == b_)
        tiles = tiles[np.argsort(s_idx[tiles], kind="stable")]  # schedule order
        order_t = tiles[np.argsort(start[tiles], kind="stable")]  # time order (ties keep schedule)
        assert np.array_equal(order_t, tiles), f"CTA {b_} started its tiles out of schedule order"
        assert (start[tiles[1:]] >= start[tiles[:-1]]).all()  # >=: %globaltimer ticks coarsely
        assert (end[tiles[1:]] >= end[tiles[:-1]]).all(), f"CTA {b_} finished its tiles out of order"
        wave[order_t] = np.arange(len(order_t))
    assert np.array_equal(wave, grid.tile_wave)
    for b_ in range(min(P, grid.num_tiles)):
        assert len(set(smid[cta == b_].tolist())) == 1


# --- walks without reads: a late warp ------------------------------------------------------------
# A warpgroup that walks stages without reading them (the second warpgroup of a tile row past M, a
# cluster's phantom unit) frees each with one thread's arrival once its warps have met (walk_bar).
# Compiled with a warp that sleeps before each wait of a walk (FO_SM90_WALK_LAG_NS), in a process of
# its own (a trapped launch ends its CUDA context): with the meeting the launches finish, correct;
# without it (FO_SM90_WALK_MEET=0) the late warp waits on a later phase and the hang trap fires.
# (The script follows a line CASES = [(label, M, N, K, ctas), ...].)
WALK_SCRIPT = """
import torch
from fo_lib.experiments.kernel_bench import config_variant
from fo_lib.gemm import sm90
for label, M, N, K, ctas in CASES:
    cfg = config_variant(sm90.CONFIGS, label, M)
    g = torch.Generator(device="cuda").manual_seed(M + N)
    a = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16)
    out = sm90.gemm_nt(a, b, config=cfg, ctas=ctas)
    want = a.double() @ b.double().T
    err = float((out.double() - want).norm() / want.norm())
    assert err < 1e-2, (label, err)
    print("ok", label, f"{err:.2e}", flush=True)
"""


def _with_a_late_warp(tmp_path, script: str, options: str):
    """``script`` run in a process of its own with the kernels compiled with ``options`` and the
    hang trap (a fresh kernel cache)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, FO_CACHE_DIR=str(tmp_path / "cache"), FO_NVRTC_OPTIONS=f"{options} -DFO_SM90_HANG_TRAP=1",
               FO_SM90_AUTOTUNE="0", PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180,
                          cwd=repo)


def _walk_with_a_late_warp(tmp_path, meet: bool):
    cases = '[("128x256x64/row1", 130, 1024, 4096, 132), ("128x128x64c2/row2", 100, 640, 4096, 132)]'
    options = "-DFO_SM90_WALK_LAG_NS=20000" + ("" if meet else " -DFO_SM90_WALK_MEET=0")
    return _with_a_late_warp(tmp_path, f"CASES = {cases}" + WALK_SCRIPT, options)


def test_a_walk_waits_for_its_late_warp(tmp_path):
    run = _walk_with_a_late_warp(tmp_path, meet=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.count("ok ") == 2 and "fo_sm90 hang" not in run.stdout


def test_without_the_meeting_a_late_walking_warp_hangs(tmp_path):
    run = _walk_with_a_late_warp(tmp_path, meet=False)
    assert run.returncode != 0 and "fo_sm90 hang" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]


@pytest.mark.parametrize("handover_all", [False, True])
def test_ping_pong_hands_its_turn_over_with_no_warp_behind(tmp_path, handover_all):
    """Ping-pong thread 0 (FO_SM90_HANDOVER_ALL=1: every thread) hands the tensor cores to the other
    warpgroup once its unit's MMAs are issued; with units of one k-block (K = 64) and warps 1-3 late
    at their order barrier (FO_SM90_ORDER_LAG_NS), the launches must still finish, correct (a warp
    left two turns behind would wait on a later phase)."""
    # Two CTAs: 32 units each, the warpgroups' turns alternating.
    cases = '[("128x128x64p/row1", 1024, 1024, 64, 2), ("128x176x64pd/row1", 1000, 1000, 128, 2)]'
    options = f"-DFO_SM90_ORDER_LAG_NS=20000 -DFO_SM90_HANDOVER_ALL={int(handover_all)}"
    run = _with_a_late_warp(tmp_path, f"CASES = {cases}" + WALK_SCRIPT, options)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.count("ok ") == 2 and "fo_sm90 hang" not in run.stdout
