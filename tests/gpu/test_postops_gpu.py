"""GPU checks of fo_lib.postops' numerics: the post-reorder gather + fused epilogue against the float64
NumPy reference (random tile and slot layouts, summed copies, tails in R and N, both dtypes, both
paths, NaN-poisoned outputs and buffers, guard frames), fo_lib.reorder's tables and torch's RMSNorm."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import postops  # noqa: E402
from fo_lib.postops import PostOps  # noqa: E402
from postops_cases import DTYPES, IN_PLACE, OPS, SHAPES, TOL, assert_close, run_case, to_np  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


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
