"""What the post-reorder's GPU test files share: the post-op sets and shapes, tolerances, random
table layouts, NaN-poisoned buffers and guard frames, and ``run_case``, one call checked against the
float64 NumPy reference."""
import numpy as np
import pytest
import torch

from fo_lib import postops
from fo_lib.postops import PostOps
from fo_lib.testing import random_tile_layout

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
