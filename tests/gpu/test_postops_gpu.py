"""GPU checks of fo_lib.postops: the post-reorder gather + fused epilogue against the float64 NumPy
reference (random tile layouts, tails in R and N, both dtypes, both paths, NaN-poisoned outputs and
buffers, guard frames), and the counting-table wait (release by a later bump, timeout -> WaitError,
back-to-back epochs without resets, counters already past the target)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import postops  # noqa: E402
from fo_lib.postops import PostOps  # noqa: E402
from fo_lib.testing import random_tile_layout  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
# Output rounding is at most half an ulp (bf16: 2^-8, f16: 2^-11 relative); fp32 math and the
# fast-math exp/rsqrt add ~1e-6. Any gather mistake reads NaN or an unrelated value.
TOL = {"bf16": dict(rtol=2.0 ** -7, atol=1e-4), "f16": dict(rtol=2.0 ** -10, atol=1e-4)}

OPS = {
    "gather": PostOps(),
    "bias": PostOps(bias=True),
    "relu": PostOps(activation="relu"),
    "silu": PostOps(activation="silu"),
    "gelu_tanh": PostOps(activation="gelu_tanh"),
    "gelu_erf": PostOps(activation="gelu_erf"),
    "residual": PostOps(residual=True),
    "residual_out": PostOps(residual_out=True),
    "rmsnorm": PostOps(rmsnorm=True, eps=1e-5),
    "add_rmsnorm": PostOps(residual=True, residual_out=True, rmsnorm=True),    # residual_out aliases residual
    "all": PostOps(bias=True, activation="gelu_erf", residual=True, residual_out=True, rmsnorm=True),
    "all_silu_nonorm": PostOps(bias=True, activation="silu", residual=True, residual_out=True),
}
IN_PLACE = {"add_rmsnorm"}

# N -> (R, BM, BN): tails in R (R % BM != 0) and in N (N % BN != 0) where possible.
SHAPES = {1: (70, 16, 16), 7: (70, 32, 16), 64: (133, 16, 32), 1000: (77, 32, 128), 4096: (37, 16, 128),
          8192: (19, 8, 256), 16384: (11, 4, 128), 16385: (10, 4, 128)}


# --- helpers -----------------------------------------------------------------------------------
def tile_layout(R, N, BM, BN, rng, shift=0, gap=8):
    """Random tile layout with gaps (see fo_lib.testing.random_tile_layout) -> (table, buffer size)."""
    return random_tile_layout(R, N, BM, BN, rng, shift=shift, gap=gap)


def slot_layout(R, N, BN, rng, shift=0):
    """ReduceScatter/AllGather-like: every (row, tile column) run in its own random BN-sized slot."""
    tn_n = -(-N // BN)
    perm = rng.permutation(R * tn_n).astype(np.int64)
    return np.ascontiguousarray(perm.reshape(R, tn_n) * BN + shift), R * tn_n * BN + shift + BN


def element_index(table, N, BN):
    j = np.arange(N)
    return table[:, j // BN] + (j % BN)[None, :]


def to_np(t):
    return t.detach().double().cpu().numpy()


def make_buf(table, size, R, N, BN, dtype, seed):
    """NaN-filled buffer holding random values at exactly the slots the table addresses."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    buf = torch.full((size,), float("nan"), dtype=DTYPES[dtype], device="cuda")
    idx = torch.from_numpy(element_index(table, N, BN).reshape(-1)).cuda()
    assert idx.unique().numel() == R * N  # bijection onto its slots
    buf[idx] = torch.randn(R * N, device="cuda", generator=g).to(DTYPES[dtype])
    return buf


def summed_copies(table, size, R, N, BN, dtype, seed, rng, sources, strides):
    """A NaN-filled buffer holding ``sources`` copies of random values at ``table + s * stride``, and
    that stride. ``per_entry``: a stride that differs per entry (groups of different lengths),
    ``size * (1 + k)``, k in {0, 1}: injective over (entry, s) because the table is injective and
    below ``size``; ``unaligned``: one stride of ``size + 1``, so copy 0 is 16-byte aligned and the
    others are not (the vector path's 2-byte fallback for the peers only)."""
    if strides == "per_entry":
        stride = (size * (1 + rng.integers(0, 2, table.shape))).astype(np.int64)
    else:
        stride = np.full(table.shape, size + 1, dtype=np.int64)  # copies back to back, one element apart
    tdt = DTYPES[dtype]
    buf = torch.full((size * (1 + 2 * (sources - 1)) + sources,), float("nan"), dtype=tdt, device="cuda")
    idx = np.concatenate([element_index(table + s * stride, N, BN).reshape(-1) for s in range(sources)])
    assert np.unique(idx).size == idx.size
    g = torch.Generator(device="cuda").manual_seed(seed)
    buf[torch.from_numpy(idx).cuda()] = torch.randn(idx.size, device="cuda", generator=g).to(tdt)
    return buf, stride


def guarded_out(R, N, dtype, aligned=True):
    """NaN-filled frame around an [R, N] view; row stride > N (multiple of 8 when aligned)."""
    ld = -(-(N + 16) // 8) * 8 if aligned else N + 19
    frame = torch.full((R + 2, ld), float("nan"), dtype=DTYPES[dtype], device="cuda")
    col = 8 if aligned else 3
    out = frame[1:R + 1, col:col + N]
    mask = torch.zeros(frame.shape, dtype=torch.bool)
    mask[1:R + 1, col:col + N] = True
    return frame, out, mask


def assert_close(got, ref, dtype, what):
    got = to_np(got) if hasattr(got, "detach") else got
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    finite = np.isfinite(got)
    assert finite.all(), f"{what}: {np.count_nonzero(~finite)} non-finite values, first at {np.argwhere(~finite)[0]}"
    tol = TOL[dtype]
    err = np.abs(got - ref)
    bad = err > tol["atol"] + tol["rtol"] * np.abs(ref)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        pytest.fail(f"{what}: {np.count_nonzero(bad)} of {bad.size} elements off; first at {i}: got {got[i]!r}, "
                    f"want {ref[i]!r}; max abs err {err.max():.3g}")


def assert_guard(frame, mask, what):
    outside = to_np(frame)[~mask.numpy()]
    assert np.isnan(outside).all(), f"{what}: {np.count_nonzero(~np.isnan(outside))} writes outside the output"


def run_case(R, N, BM, BN, dtype, ops, *, seed, layout="tile", shift=0, vectorized=None, aligned_out=True,
             in_place=False, threads_per_row=None, stream=None, sources=1, strides="per_entry"):
    rng = np.random.default_rng(seed)
    if layout == "tile":
        table, size = tile_layout(R, N, BM, BN, rng, shift=shift)
    else:
        table, size = slot_layout(R, N, BN, rng, shift=shift)
    if sources == 1:
        buf, stride = make_buf(table, size, R, N, BN, dtype, seed), None
    else:
        buf, stride = summed_copies(table, size, R, N, BN, dtype, seed, rng, sources, strides)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    tdt = DTYPES[dtype]
    bias = (0.5 * torch.randn(N, device="cuda", generator=g)).to(tdt) if ops.bias else None
    residual = torch.randn(R, N, device="cuda", generator=g).to(tdt) if ops.residual else None
    weight = (0.5 + torch.rand(N, device="cuda", generator=g)).to(tdt) if ops.rmsnorm else None
    residual_in = residual.clone() if residual is not None else None
    if ops.residual_out:
        residual_out = residual if in_place else torch.full((R, N), float("nan"), dtype=tdt, device="cuda")
    else:
        residual_out = None
    frame, out, mask = guarded_out(R, N, dtype, aligned_out)

    ref_pre = np.full((R, N), np.nan) if ops.residual_out else None
    ref = postops.post_reorder_reference(
        to_np(buf), table, (R, N), BN, ops, bias=None if bias is None else to_np(bias),
        residual=None if residual is None else to_np(residual), weight=None if weight is None else to_np(weight),
        residual_out=ref_pre, sources=sources, peer_stride=stride)

    table_t = torch.from_numpy(table).cuda()
    res = postops.post_reorder(buf, table_t, (R, N), BN, ops, bias=bias, residual=residual,
                               residual_out=residual_out, weight=weight, out=out, stream=stream,
                               vectorized=vectorized, check_table=True, threads_per_row=threads_per_row,
                               sources=sources, peer_stride=None if stride is None else torch.from_numpy(stride).cuda())
    assert res is out
    torch.cuda.synchronize()
    what = (f"{ops.describe()} {dtype} R={R} N={N} BN={BN} layout={layout} shift={shift} vec={vectorized}"
            + (f" sum of {sources} ({strides})" if sources > 1 else ""))
    assert_close(out, ref, dtype, what)
    assert_guard(frame, mask, what)
    if ops.residual_out:
        assert_close(residual_out, ref_pre, dtype, what + " residual_out")
    if residual is not None and not in_place:  # the inputs are left alone
        assert torch.equal(residual, residual_in)


# --- post-reorder numerics -----------------------------------------------------------------------
@pytest.mark.parametrize("path", ["auto", "scalar"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("N", list(SHAPES))
@pytest.mark.parametrize("opname", list(OPS))
def test_post_reorder_matches_reference(opname, N, dtype, path):
    R, BM, BN = SHAPES[N]
    run_case(R, N, BM, BN, dtype, OPS[opname], seed=N * 31 + len(opname), in_place=opname in IN_PLACE,
             vectorized=None if path == "auto" else False)


@pytest.mark.parametrize("path", ["auto", "scalar"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("W", [2, 3])
@pytest.mark.parametrize("N", [64, 1000, 8192])
@pytest.mark.parametrize("opname", ["gather", "rmsnorm", "all", "all_silu_nonorm"])
@pytest.mark.parametrize("strides", ["per_entry", "unaligned"])
def test_summed_copies_match_reference(opname, N, W, dtype, path, strides):
    """sources = W: the copies of a gathered AllReduce, copy s at table + s * peer_stride; every
    other slot is NaN (see summed_copies)."""
    R, BM, BN = SHAPES[N]
    run_case(R, N, BM, BN, dtype, OPS[opname], seed=N + 7 * W, vectorized=None if path == "auto" else False,
             sources=W, strides=strides)


def test_summed_copies_validation():
    R, N, BN = 8, 256, 64
    table, size = tile_layout(R, N, 4, BN, np.random.default_rng(2))
    buf = make_buf(table, 2 * size, R, N, BN, "bf16", 2)
    t = torch.from_numpy(table).cuda()
    stride = torch.full_like(t, size)
    pr = postops.post_reorder
    with pytest.raises(ValueError, match="peer_stride goes with"):
        pr(buf, t, (R, N), BN, sources=2)
    with pytest.raises(ValueError, match="peer_stride goes with"):
        pr(buf, t, (R, N), BN, peer_stride=stride)
    with pytest.raises(ValueError, match="sources must be"):
        pr(buf, t, (R, N), BN, sources=postops.MAX_SOURCES + 1, peer_stride=stride)
    with pytest.raises(ValueError, match="peer_stride must be"):
        pr(buf, t, (R, N), BN, sources=2, peer_stride=stride.int())
    with pytest.raises(ValueError, match="outside buf"):
        pr(buf, t, (R, N), BN, sources=2, peer_stride=stride * 4, check_table=True)


def test_auto_path_choice():
    """The vectorized path is taken for aligned shapes (the timing-relevant one)."""
    R, N, BN = 8, 4096, 128
    rng = np.random.default_rng(0)
    table, size = tile_layout(R, N, 4, BN, rng)
    buf = make_buf(table, size, R, N, BN, "bf16", 0)
    t = torch.from_numpy(table).cuda()
    assert postops.post_reorder_launcher(buf, t, (R, N), BN).vectorized
    postops.post_reorder(buf, t, (R, N), BN, vectorized=True)  # must not raise
    odd_ld = torch.empty(R, N + 3, dtype=torch.bfloat16, device="cuda")[:, :N - 8]  # row stride not % 8
    assert not postops.post_reorder_launcher(buf, t, (R, N - 8), BN, out=odd_ld).vectorized
    with pytest.raises(ValueError, match="vectorized"):
        postops.post_reorder(buf, t, (R, N - 8), BN, vectorized=True, out=odd_ld)
    assert not postops.post_reorder_launcher(buf[1:], t, (R, N), BN).vectorized  # buf not 16-byte aligned


@pytest.mark.parametrize("shift", [1, 3, 7])
@pytest.mark.parametrize("opname", ["gather", "rmsnorm", "all"])
def test_unaligned_table_entries_on_vector_path(opname, shift):
    """Offsets not multiples of 8 with BN % 8 == 0: each chunk falls back to 2-byte loads."""
    run_case(45, 4096, 16, 128, "bf16", OPS[opname], seed=shift, shift=shift, vectorized=True)
    run_case(45, 1000, 16, 64, "f16", OPS[opname], seed=shift + 10, shift=shift, vectorized=True)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("N,BN", [(1, 16), (100, 16), (4096, 128), (4104, 256), (16385, 128)])
@pytest.mark.parametrize("opname", ["gather", "add_rmsnorm", "all"])
def test_slot_table(opname, N, BN, dtype):
    """A table with no tile structure at all (every run in its own random slot)."""
    run_case(23, N, 1, BN, dtype, OPS[opname], seed=N + BN, layout="slot", in_place=opname in IN_PLACE)


@pytest.mark.parametrize("R", [1, 2, 255])
@pytest.mark.parametrize("N", [8, 1000, 8192])
@pytest.mark.parametrize("opname", ["gather", "rmsnorm", "all_silu_nonorm"])
def test_row_counts_and_unaligned_out(opname, N, R):
    run_case(R, N, 16, 128, "bf16", OPS[opname], seed=R + N, aligned_out=False)  # ldo odd -> scalar
    run_case(R, N, 16, 128, "f16", OPS[opname], seed=R + N + 1)


@pytest.mark.parametrize("N,G", [(1000, 64), (1000, 1024), (4096, 1024), (4096, 160), (16384, 1024), (64, 96)])
@pytest.mark.parametrize("opname", ["rmsnorm", "gather", "all"])
def test_threads_per_row_override(opname, N, G):
    """Several rows per CTA with G > 32, threads with empty items, odd warp counts."""
    if not OPS[opname].rmsnorm and G > 512:
        G = 512
    for vec in (None, False):
        run_case(41, N, 16, 128, "bf16", OPS[opname], seed=G + N, threads_per_row=G, vectorized=vec)


def test_largest_rmsnorm_row():
    N = postops.MAX_NORM_N
    run_case(3, N, 1, 128, "bf16", OPS["all"], seed=5)
    run_case(3, N - 7, 1, 128, "f16", OPS["add_rmsnorm"], seed=6, in_place=True)


def test_long_streaming_rows_split_across_ctas():
    run_case(2, 100_000, 1, 256, "bf16", OPS["all_silu_nonorm"], seed=7)
    run_case(1, 70_001, 1, 64, "f16", OPS["gather"], seed=8)


def test_reorder_module_tables():
    """Tables built by fo_lib.reorder (AllReduce tile layout; ReduceScatter -> AllGather restore)."""
    from fo_lib import reorder
    from fo_lib.tiling import TileGrid
    rng = np.random.default_rng(11)
    for M, N, BM, BN in [(300, 520, 64, 128), (256, 4096, 128, 128), (130, 1000, 64, 64)]:
        grid = TileGrid.with_ctas(M, N, 5, BM=BM, BN=BN)
        part = (1, grid.num_waves - 1) if grid.num_waves > 1 else (1,)
        C = rng.standard_normal((M, N))
        tables = [(reorder.tile_reorder(grid, part).post_table, M * N)]
        sub = reorder.subtile_reorder(grid, part, 2)
        tables.append((sub.allgather_table(), 2 * sub.max_rows * N))
        for table, size in tables:
            buf_np = reorder.pre_reorder(C, table, size, BN)
            for dtype in DTYPES:
                buf = torch.from_numpy(buf_np).to(DTYPES[dtype]).cuda()
                weight = torch.ones(N, dtype=DTYPES[dtype], device="cuda")
                t = torch.from_numpy(np.ascontiguousarray(table)).cuda()
                got = postops.post_reorder(buf, t, (M, N), BN, check_table=True)
                assert torch.equal(got, torch.from_numpy(C).to(DTYPES[dtype]).cuda())
                ops = PostOps(rmsnorm=True)
                got = postops.post_reorder(buf, t, (M, N), BN, ops, weight=weight)
                ref = postops.post_reorder_reference(to_np(buf), table, (M, N), BN, ops, weight=to_np(weight))
                assert_close(got, ref, dtype, f"reorder table {M}x{N}")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("R,N", [(1024, 1024), (64, 4096), (33, 16384), (5, 1000)])
def test_identity_table_matches_torch_rms_norm(R, N, dtype):
    if not hasattr(torch.nn.functional, "rms_norm"):
        pytest.skip("torch has no rms_norm")
    tdt = DTYPES[dtype]
    x = torch.randn(R, N, device="cuda").to(tdt)
    w = (0.5 + torch.rand(N, device="cuda")).to(tdt)
    BN = 128
    tiles_n = -(-N // BN)
    table = (torch.arange(R, device="cuda")[:, None] * N
             + torch.arange(tiles_n, device="cuda")[None, :] * BN).to(torch.int64).contiguous()
    got = postops.post_reorder(x.reshape(-1), table, (R, N), BN, PostOps(rmsnorm=True, eps=1e-6), weight=w)
    want = torch.nn.functional.rms_norm(x, (N,), w, eps=1e-6)
    ref = postops.post_reorder_reference(to_np(x).reshape(-1), table.cpu().numpy(), (R, N), BN,
                                         PostOps(rmsnorm=True, eps=1e-6), weight=to_np(w))
    assert_close(got, ref, dtype, "identity table")
    # torch may round x * rstd before multiplying by the weight: allow one more rounding
    diff = (got.double() - want.double()).abs().max().item()
    assert diff <= 4 * TOL[dtype]["rtol"] * want.double().abs().max().item()
    # plain gather through the identity table is a copy
    assert torch.equal(postops.post_reorder(x.reshape(-1), table, (R, N), BN), x)


def test_launcher_reuse_and_graph_capture():
    R, N, BN = 64, 4096, 128
    rng = np.random.default_rng(21)
    table, size = tile_layout(R, N, 16, BN, rng)
    buf = make_buf(table, size, R, N, BN, "bf16", 21)
    t = torch.from_numpy(table).cuda()
    w = (0.5 + torch.rand(N, device="cuda")).to(torch.bfloat16)
    ops = PostOps(rmsnorm=True)
    ref = postops.post_reorder_reference(to_np(buf), table, (R, N), BN, ops, weight=to_np(w))
    launch = postops.post_reorder_launcher(buf, t, (R, N), BN, ops, weight=w)
    assert launch.vectorized
    launch()
    torch.cuda.synchronize()
    assert_close(launch.out, ref, "bf16", "launcher")
    launch.out.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()  # no stream given: the launch must go to the capturing stream
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    assert_close(launch.out, ref, "bf16", "graph replay")


def test_side_stream_and_empty():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        run_case(17, 4096, 8, 128, "bf16", OPS["add_rmsnorm"], seed=3, in_place=True, stream=s)
    R, N, BN = 0, 64, 32
    buf = torch.zeros(16, dtype=torch.bfloat16, device="cuda")
    out = postops.post_reorder(buf, torch.zeros((0, 2), dtype=torch.int64, device="cuda"), (R, N), BN)
    assert out.shape == (0, 64)


def test_validation_errors():
    R, N, BN = 8, 256, 64
    rng = np.random.default_rng(1)
    table, size = tile_layout(R, N, 4, BN, rng)
    buf = make_buf(table, size, R, N, BN, "bf16", 1)
    t = torch.from_numpy(table).cuda()
    bf, f16 = torch.bfloat16, torch.float16
    w = torch.ones(N, dtype=bf, device="cuda")
    pr = postops.post_reorder
    with pytest.raises(ValueError, match="CUDA"):
        pr(buf.cpu(), t, (R, N), BN)
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        pr(buf.float(), t, (R, N), BN)
    with pytest.raises(TypeError, match="int64"):
        pr(buf, t.int(), (R, N), BN)
    with pytest.raises(ValueError, match="shape"):
        pr(buf, t[:, :-1].contiguous(), (R, N), BN)
    with pytest.raises(ValueError, match="contiguous"):
        pr(buf, torch.empty(t.shape[1], R, dtype=torch.int64, device="cuda").T, (R, N), BN)
    with pytest.raises(ValueError, match="no weight"):
        pr(buf, t, (R, N), BN, PostOps(rmsnorm=True))
    with pytest.raises(ValueError, match="not enable"):
        pr(buf, t, (R, N), BN, PostOps(), weight=w)
    with pytest.raises(TypeError, match="dtype"):
        pr(buf, t, (R, N), BN, PostOps(rmsnorm=True), weight=w.to(f16))
    with pytest.raises(ValueError, match="shape"):
        pr(buf, t, (R, N), BN, PostOps(bias=True), bias=torch.ones(N + 1, dtype=bf, device="cuda"))
    with pytest.raises(ValueError, match="contiguous"):
        pr(buf, t, (R, N), BN, PostOps(residual=True),
           residual=torch.ones(N, R, dtype=bf, device="cuda").T)
    with pytest.raises(ValueError, match="N <="):
        big = postops.MAX_NORM_N + 8
        pr(buf, torch.zeros(R, -(-big // BN), dtype=torch.int64, device="cuda"), (R, big), BN,
           PostOps(rmsnorm=True), weight=torch.ones(big, dtype=bf, device="cuda"))
    with pytest.raises(ValueError, match="outside buf"):
        bad = t.clone()
        bad[3, 2] = size - 10
        pr(buf, bad, (R, N), BN, check_table=True)
    with pytest.raises(ValueError, match="outside buf"):
        bad = t.clone()
        bad[0, 0] = -1
        pr(buf, bad, (R, N), BN, check_table=True)
    with pytest.raises(ValueError, match="overlaps"):
        pr(buf, t, (R, N), BN, out=buf[:R * N].view(R, N))
    big = torch.randn(R * N + 8, device="cuda").to(bf)
    with pytest.raises(ValueError, match="overlaps residual"):  # partial overlap (an exact alias is fine)
        pr(buf, t, (R, N), BN, PostOps(residual=True, residual_out=True), residual=big[:R * N].view(R, N),
           residual_out=big[8:8 + R * N].view(R, N))
    with pytest.raises(ValueError, match="out must have shape"):
        pr(buf, t, (R, N), BN, out=torch.empty(R, N + 1, dtype=bf, device="cuda"))
    with pytest.raises(ValueError, match="unit column stride"):
        pr(buf, t, (R, N), BN, out=torch.empty(N, R, dtype=bf, device="cuda").T)
    with pytest.raises(ValueError, match="BN"):
        pr(buf, t, (R, N), 0)
    with pytest.raises(ValueError, match="out_shape"):
        pr(buf, t, (R,), BN)
