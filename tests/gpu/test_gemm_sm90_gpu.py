"""GPU checks of fo_lib.gemm.sm90 (compute capability 9.0 only): numerics against float64 on fresh
random inputs with poisoned outputs and guard frames, the default config, operand views, streams and
refused inputs, and the probe's timestamps against the wave model."""
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import gemm  # noqa: E402
from fo_lib.gemm import sm90 as gemm_sm90  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402
from fo_lib.tiling import TileGrid  # noqa: E402
from gemm_helpers import DTYPES, SHAPES, TOL, guarded_out, inputs, ref  # noqa: E402
from sm90_cases import CONFIG_NAMES, NEEDS_SM90  # noqa: E402

pytestmark = [pytest.mark.gpu, NEEDS_SM90]

# K tails inside the last 64-wide k-block and K below one k-block (TMA zero fill), on top of SHAPES.
SHAPES_SM90 = SHAPES + [(129, 130, 8), (200, 300, 72), (1000, 777, 4104), (333, 4100, 4040)]


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
    ("128x168x64pd", 2000, 3000, 512, 64, "col", 3),
    ("128x176x64pd", 2000, 3000, 512, 64, "row", 5),
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
