"""GPU checks of fo_lib.gemm: numerics against float64, tails and guard regions, the signal epilogue's
row table and counters, the probe's waves, and the device raster against fo_lib.tiling."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import gemm, jit  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402
from fo_lib.tiling import TileGrid, raster_tile  # noqa: E402
from gemm_helpers import DTYPES, SHAPES, TOL, check_signal_rejects_bad_tables  # noqa: E402
from gemm_helpers import gather_index as _gather_index  # noqa: E402
from gemm_helpers import guarded_out as _guarded_out  # noqa: E402
from gemm_helpers import inputs as _inputs  # noqa: E402
from gemm_helpers import ref as _ref  # noqa: E402
from gemm_helpers import signal_tables as _signal_tables  # noqa: E402

pytestmark = pytest.mark.gpu

CONFIG_NAMES = list(gemm.CONFIGS)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("cname", CONFIG_NAMES)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_gemm_plain(M, N, K, cname, dtype):
    cfg = gemm.CONFIGS[cname].with_raster("row", 4)
    a, b = _inputs(M, N, K, dtype, seed=M * 7 + N * 13 + K)
    buf, out, mask = _guarded_out(M, N, dtype)
    gemm.gemm_nt(a, b, out, config=cfg)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "unwritten (NaN) elements in the output"
    assert torch.isnan(buf[~mask]).all(), "the kernel wrote outside the output view"
    err = calc_diff(out, _ref(a, b))
    assert err < TOL[dtype], f"rel. error {err:.3g}"


@pytest.mark.parametrize("M,N,K,ctas,order,swizzle", [
    (1000, 3000, 256, None, "row", 1), (1000, 3000, 256, 7, "col", 3), (4096, 4096, 512, 132, "row", 8),
    (77, 9000, 64, 5, "col", 1), (3333, 333, 96, 1, "row", 2)])
def test_gemm_default_and_ctas(M, N, K, ctas, order, swizzle):
    a, b = _inputs(M, N, K, "bf16", seed=1)
    out = gemm.gemm_nt(a, b, ctas=ctas)  # default config
    assert calc_diff(out, _ref(a, b)) < TOL["bf16"]
    cfg = gemm.default_config(M, N, K, gemm.sm_count()).with_raster(order, swizzle)
    out2 = gemm.gemm_nt(a, b, config=cfg, ctas=ctas)
    assert torch.equal(out, out2), "raster/ctas must not change the result (same k order per tile)"


def test_gemm_on_side_stream():
    a, b = _inputs(1024, 1024, 1024, "f16", seed=2)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = gemm.gemm_nt(a, b)
    s.synchronize()
    assert calc_diff(out, _ref(a, b)) < TOL["f16"]
    out2 = gemm.gemm_nt(a, b, stream=s)
    s.synchronize()
    assert torch.equal(out, out2)


def test_gemm_rejects_bad_inputs():
    a, b = _inputs(64, 64, 64, "bf16", seed=3)
    with pytest.raises(gemm.GemmError, match="bfloat16 and float16"):
        gemm.gemm_nt(a.float(), b.float())
    with pytest.raises(gemm.GemmError, match="same dtype"):
        gemm.gemm_nt(a, b.half())
    with pytest.raises(gemm.GemmError, match="K mismatch"):
        gemm.gemm_nt(a, b[:, :32])
    with pytest.raises(gemm.GemmError, match="multiple of 8"):
        gemm.gemm_nt(a[:, :60], b[:, :60])
    with pytest.raises(gemm.GemmError, match="unit stride"):
        gemm.gemm_nt(a.T, b)
    with pytest.raises(gemm.GemmError, match="CUDA"):
        gemm.gemm_nt(a.cpu(), b.cpu())
    with pytest.raises(gemm.GemmError, match="aligned"):
        gemm.gemm_nt(a.flatten()[1:4097 - 64].view(63, 64), b)
    with pytest.raises(gemm.GemmError, match="must be"):
        gemm.gemm_nt(a, b, torch.empty(64, 65, dtype=a.dtype, device="cuda"))


# --- signal epilogue -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("cname", CONFIG_NAMES)
@pytest.mark.parametrize("M,N,K,groups", [(1, 8, 8, 1), (100, 300, 64, 3), (1000, 2000, 264, 5),
                                          (2048, 4096, 512, 8), (257, 129, 40, 2), (77, 1000, 16, 4)])
@pytest.mark.parametrize("epilogue", ["signal", "scatter", "signal_rows"])
def test_gemm_signal(M, N, K, groups, cname, dtype, epilogue):
    cfg = gemm.CONFIGS[cname].with_raster("col", 2)
    a, b = _inputs(M, N, K, dtype, seed=M + N + K)
    row_offset, tile_group, grid = _signal_tables(M, N, cfg, groups, seed=M * N)
    guard = 64
    comm = torch.full((M * N + guard,), float("nan"), dtype=DTYPES[dtype], device="cuda")
    ro = torch.from_numpy(row_offset).cuda()
    tg = torch.from_numpy(tile_group).cuda()
    counters = torch.zeros(groups, dtype=torch.int32, device="cuda")
    if epilogue == "signal_rows":  # C row-major into comm, no table: the rows layout's store
        row_offset = np.arange(M, dtype=np.int64)[:, None] * N + np.arange(grid.tiles_n)[None, :] * cfg.BN
        gemm.gemm_nt_signal(a, b, comm, None, tg, counters, config=cfg)
    elif epilogue == "signal":
        gemm.gemm_nt_signal(a, b, comm, ro, tg, counters, config=cfg)
    else:
        gemm.gemm_nt_scatter(a, b, comm, ro, config=cfg)
    plain = gemm.gemm_nt(a, b, config=cfg)
    torch.cuda.synchronize()
    assert not torch.isnan(comm[:M * N]).any(), "comm_buf elements left unwritten"
    assert torch.isnan(comm[M * N:]).all(), "comm_buf written past the table's range"
    idx = torch.from_numpy(_gather_index(row_offset, M, N, cfg.BN)).cuda()
    got = comm[idx]
    assert torch.equal(got, plain), "signal epilogue stored different values / places than plain"
    assert calc_diff(got, _ref(a, b)) < TOL[dtype]
    expect = np.bincount(tile_group, minlength=groups) if epilogue != "scatter" else np.zeros(groups)
    assert counters.cpu().numpy().tolist() == expect.tolist()


@pytest.mark.parametrize("mode,store", [("tile", "table"), ("tile", "places"), ("subtile", "table"),
                                        ("subtile", "places"), ("subtile8", "places"), ("subtoken", "table")])
@pytest.mark.parametrize("M,N,K", [(1000, 1100, 64), (4096, 2048, 128), (300, 4096, 32)])
def test_gemm_signal_with_reorder_tables(mode, store, M, N, K):
    """The kernel stores exactly where fo_lib.reorder's tables say (the NumPy pre-reorder), through
    the row table or (tile blocks) through the tiles' places."""
    from fo_lib import reorder

    cfg = gemm.CONFIGS["128x128x32"].with_raster("row", 4)
    ctas = 40
    grid = TileGrid(M, N, cfg.BM, cfg.BN, order="row", swizzle=4, _ctas=ctas)
    T = grid.num_waves
    part = tuple([1] * min(T, 3) + ([T - 3] if T > 3 else []))
    rng = np.random.default_rng(M + N)
    if mode == "tile":
        plan = reorder.tile_reorder(grid, part)
    elif mode.startswith("subtile"):
        plan = reorder.subtile_reorder(grid, part, 8 if mode == "subtile8" else 4)
    else:
        W = 3
        dest = [rng.integers(0, W, M) for _ in range(W)]
        idx = [np.zeros(M, dtype=np.int64) for _ in range(W)]
        cnt = np.zeros(W, dtype=np.int64)
        for s_ in range(W):
            for i in range(M):
                idx[s_][i] = cnt[dest[s_][i]]
                cnt[dest[s_][i]] += 1
        plan = reorder.subtoken_reorder(grid, part, dest, idx, 1)
    a, b = _inputs(M, N, K, "bf16", seed=M)
    n = plan.buffer_elements
    comm = torch.full((n,), float("nan"), dtype=torch.bfloat16, device="cuda")
    counters = torch.zeros(len(part), dtype=torch.int32, device="cuda")
    tables = (dict(row_offset=torch.from_numpy(plan.row_offset).cuda()) if store == "table" else
              dict(row_offset=None, tile_place=torch.from_numpy(plan.tile_place).cuda()))
    gemm.gemm_nt_signal(a, b, comm, tile_group=torch.from_numpy(plan.tile_group).cuda(), group_counter=counters,
                        config=cfg, ctas=ctas, **tables)
    plain = gemm.gemm_nt(a, b, config=cfg).float().cpu().numpy()
    expect = reorder.pre_reorder(plain, plan.row_offset, n, cfg.BN)
    got = comm.float().cpu().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expect))
    np.testing.assert_array_equal(got[~np.isnan(got)], expect[~np.isnan(expect)])
    assert counters.cpu().numpy().tolist() == plan.group_tiles.tolist()


def test_gemm_signal_counters_accumulate():
    cfg = gemm.CONFIGS["128x128x32"].with_raster("row", 2)
    M, N, K, groups, calls = 1000, 1500, 128, 6, 120
    a, b = _inputs(M, N, K, "bf16", seed=5)
    row_offset, tile_group, grid = _signal_tables(M, N, cfg, groups, seed=6)
    comm = torch.empty(M * N, dtype=torch.bfloat16, device="cuda")
    ro, tg = torch.from_numpy(row_offset).cuda(), torch.from_numpy(tile_group).cuda()
    counters = torch.zeros(groups, dtype=torch.uint32, device="cuda")
    for _ in range(calls):
        gemm.gemm_nt_signal(a, b, comm, ro, tg, counters, config=cfg, ctas=50)
    torch.cuda.synchronize()
    expect = calls * np.bincount(tile_group, minlength=groups)
    assert counters.cpu().to(torch.int64).numpy().tolist() == expect.tolist()


def test_gemm_signal_rejects_bad_tables():
    check_signal_rejects_bad_tables(gemm.PORTABLE, gemm.CONFIGS["128x128x32"])


# --- probe: timing, waves, raster ----------------------------------------------------------------
@pytest.mark.parametrize("cname,M,N,K,ctas,order,swizzle", [
    ("128x256x32", 4096, 4096, 1024, None, "row", 1),
    ("128x256x32", 4096, 4096, 1024, 132, "row", 8),
    ("128x128x32", 3000, 2000, 512, 40, "col", 3),
    ("64x64x32", 1000, 1000, 256, 17, "col", 1),
    ("256x128x32", 2000, 3000, 512, 64, "row", 5),
    ("128x256x64", 1024, 8192, 512, 100, "col", 8),
])
def test_gemm_probe_waves_and_raster(cname, M, N, K, ctas, order, swizzle):
    cfg = gemm.CONFIGS[cname].with_raster(order, swizzle)
    a, b = _inputs(M, N, K, "f16", seed=11)
    out, probe = gemm.gemm_nt_probe(a, b, config=cfg, ctas=ctas)
    torch.cuda.synchronize()
    assert calc_diff(out, _ref(a, b)) < TOL["f16"]
    sms = gemm.sm_count()
    P = sms if ctas is None else ctas
    grid = TileGrid.with_ctas(M, N, P, BM=cfg.BM, BN=cfg.BN, order=order, swizzle=swizzle)
    p = probe.cpu().numpy()
    start, end, smid, cta = p[:, 0], p[:, 1], p[:, 2], p[:, 3]
    assert (start > 0).all() and (end >= start).all()
    assert (smid < sms).all() and (smid >= 0).all()
    # Raster: CTA b ran exactly the tiles at schedule indices b, b + P, ...
    s_idx = grid.schedule_index
    assert np.array_equal(cta, s_idx % P)
    # Waves: the order of a CTA's tiles in time is its schedule order, and tile j of a CTA is wave j.
    wave = np.empty(grid.num_tiles, dtype=np.int64)
    for b_ in range(min(P, grid.num_tiles)):
        tiles = np.flatnonzero(cta == b_)
        tiles = tiles[np.argsort(s_idx[tiles], kind="stable")]  # schedule order
        order_t = tiles[np.argsort(start[tiles], kind="stable")]  # time order (ties keep schedule)
        assert np.array_equal(order_t, tiles), f"CTA {b_} ran its tiles out of schedule order"
        assert (start[tiles[1:]] >= end[tiles[:-1]]).all()
        wave[order_t] = np.arange(len(order_t))
    assert np.array_equal(wave, grid.tile_wave)
    # A CTA stays on one SM.
    for b_ in range(min(P, grid.num_tiles)):
        assert len(set(smid[cta == b_].tolist())) == 1


# --- the raster function itself ------------------------------------------------------------------
def test_raster_tile_matches_python():
    import cupy
    src, name = gemm.raster_check_source()
    kern = jit.get_kernel(src, name)
    rng = np.random.default_rng(0)
    cases = [(tm, tn, o, sw) for tm in (1, 2, 3, 7, 8, 16, 33) for tn in (1, 2, 5, 8, 31)
             for o in (0, 1) for sw in (1, 2, 3, 4, 8, 64)]
    cases += [(int(rng.integers(1, 200)), int(rng.integers(1, 200)), int(rng.integers(0, 2)),
               int(rng.integers(1, 20))) for _ in range(100)]
    for tiles_m, tiles_n, o, sw in cases:
        tiles = tiles_m * tiles_n
        out = cupy.full(2 * tiles, -1, dtype=cupy.int32)
        kern(((tiles + 127) // 128,), (128,), (out, np.int32(tiles_m), np.int32(tiles_n), np.int32(o),
                                               np.int32(sw)))
        got = out.get().reshape(tiles, 2)
        tm, tn = raster_tile(np.arange(tiles), tiles_m, tiles_n, ("row", "col")[o], sw)
        assert np.array_equal(got[:, 0], tm) and np.array_equal(got[:, 1], tn), (tiles_m, tiles_n, o, sw)
