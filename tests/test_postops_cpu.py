"""CPU checks of fo_lib.postops: every cataloged kernel source compiles for every target (NVRTC
only), PostOps validation, the launch geometry, and the NumPy reference against a direct formula."""
import dataclasses
import math

import numpy as np
import pytest

from fo_lib import postops
from fo_lib import kernel_catalog as catalog
from fo_lib.postops import PostOps
from fo_lib.testing import random_tile_layout



# --- compile checks ----------------------------------------------------------------------------
_SOURCES = list(postops.compile_check_sources())


def test_compile_check_cataloged():
    assert postops.compile_check_sources in [check.sources for check in catalog.CHECKS]
    labels = [label for label, _ in _SOURCES]
    assert len(labels) == len(set(labels))
    # every flag alone, all together, both dtypes, both paths
    for needle in ("bias", "relu", "silu", "gelu_tanh", "gelu_erf", "residual,", "residual_out", "rmsnorm",
                   "all_gelu_erf", "bf16", "f16", "vec", "scalar"):
        assert any(needle in label for label in labels), needle


def test_generate_source_names_unique():
    names = set()
    for _, ops in postops.compile_check_ops():
        for dtype in postops.DTYPES:
            for vec in (True, False):
                source, name = postops.generate_source(ops, dtype, vec)
                assert name in source and '#include "post_reorder.cuh"' in source
                assert name.isidentifier()
                names.add(name)
    assert len(names) == 2 * 2 * len(postops.compile_check_ops())
    with pytest.raises(ValueError):
        postops.generate_source(PostOps(), "fp32", True)
    with pytest.raises(TypeError):
        postops.generate_source("rmsnorm", "bf16", True)


def test_summing_sources_name_and_reference():
    src1, name1 = postops.generate_source(PostOps(), "bf16", True)
    src2, name2 = postops.generate_source(PostOps(), "bf16", True, 2)
    assert name2 == name1 + "_w2" and ", 2>(" in src2 and ", 1>(" in src1
    for bad in (0, postops.MAX_SOURCES + 1, True, 1.5):
        with pytest.raises(ValueError, match="sources must be"):
            postops.generate_source(PostOps(), "bf16", True, bad)
    # Two copies, the second one entry-dependent steps away, summed; a single copy is a gather.
    R, N, BN = 3, 10, 4
    table = (np.arange(R * 3).reshape(R, 3) * BN).astype(np.int64)
    stride = np.where(np.arange(R * 3).reshape(R, 3) % 2, 100, 50).astype(np.int64)
    buf = np.arange(200, dtype=np.float64)
    got = postops.gather_reference(buf, table, (R, N), BN, 2, stride)
    j = np.arange(N)
    want = (buf[table[:, j // BN] + j % BN] + buf[table[:, j // BN] + stride[:, j // BN] + j % BN])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(postops.post_reorder_reference(buf, table, (R, N), BN, sources=2, peer_stride=stride),
                                  want)
    with pytest.raises(ValueError, match="peer_stride goes with"):
        postops.gather_reference(buf, table, (R, N), BN, 2)
    with pytest.raises(IndexError, match="outside buf"):
        postops.gather_reference(buf, table, (R, N), BN, 2, stride * 3)


# --- PostOps validation ------------------------------------------------------------------------
def test_postops_defaults_and_normalisation():
    ops = PostOps()
    assert ops.is_identity and ops.describe() == "gather"
    assert PostOps(activation="GELU-tanh").activation == "gelu_tanh"
    assert PostOps(activation="gelu-erf").activation == "gelu_erf"
    assert PostOps(eps=1).eps == 1.0 and isinstance(PostOps(eps=1).eps, float)
    assert not PostOps(rmsnorm=True).is_identity
    assert PostOps(rmsnorm=True) == PostOps(rmsnorm=True)  # hashable/comparable: usable as a cache key
    assert hash(PostOps(activation="gelu-tanh")) == hash(PostOps(activation="gelu_tanh"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ops.bias = True


@pytest.mark.parametrize("kwargs,exc", [
    (dict(activation="tanh"), ValueError),
    (dict(activation="gelu"), ValueError),
    (dict(activation=None), TypeError),
    (dict(bias=1), TypeError),
    (dict(rmsnorm="yes"), TypeError),
    (dict(residual_out=None), TypeError),
    (dict(eps=-1e-6), ValueError),
    (dict(eps=float("nan")), ValueError),
    (dict(eps=float("inf")), ValueError),
    (dict(eps=1e31), ValueError),
    (dict(eps="1e-6"), TypeError),
    (dict(eps=True), TypeError),
])
def test_postops_rejects(kwargs, exc):
    with pytest.raises(exc):
        PostOps(**kwargs)


# --- launch geometry ---------------------------------------------------------------------------
@pytest.mark.parametrize("ops", [PostOps(), PostOps(rmsnorm=True), PostOps(bias=True, residual=True),
                                 PostOps(residual=True, residual_out=True, rmsnorm=True)])
@pytest.mark.parametrize("N", [1, 7, 8, 63, 64, 1000, 1024, 4096, 4104, 8192, 16384, 16385, 32760, 32768])
@pytest.mark.parametrize("R", [1, 3, 1000])
def test_launch_config(R, N, ops):
    cfg = postops.launch_config(R, N, ops, sm_count=132)
    g, rows = cfg.threads_per_row, cfg.rows_per_cta
    assert g % 32 == 0 and 32 <= g <= postops.MAX_THREADS_PER_ROW
    assert g * rows <= 1024
    assert cfg.grid_x * rows >= R and (cfg.grid_x - 1) * rows < R
    assert 1 <= cfg.grid_y <= 65535
    if ops.rmsnorm:
        assert cfg.grid_y == 1
        assert g * cfg.items * postops.CHUNK >= N  # the row fits in registers
    else:
        assert g <= 512


def test_launch_config_limits():
    with pytest.raises(ValueError):
        postops.launch_config(4, postops.MAX_NORM_N + 1, PostOps(rmsnorm=True))
    with pytest.raises(ValueError):
        postops.launch_config(4, 4096, PostOps(rmsnorm=True), threads_per_row=32)  # row does not fit
    with pytest.raises(ValueError):
        postops.launch_config(4, 4096, PostOps(), threads_per_row=48)
    with pytest.raises(ValueError):
        postops.launch_config(0, 4096, PostOps())
    assert postops.launch_config(4, 4096, PostOps(), threads_per_row=64).threads_per_row == 64
    # short rows share a CTA, long streaming rows split across column blocks when R is small
    assert postops.launch_config(1000, 64, PostOps()).rows_per_cta == 8
    assert postops.launch_config(1, 1 << 20, PostOps()).grid_y > 1


# --- NumPy reference -----------------------------------------------------------------------------
def tile_layout(R, N, BM, BN, rng, shift=0, gap=8):
    """Random tile layout with gaps (see fo_lib.testing.random_tile_layout) -> (table, buffer size)."""
    return random_tile_layout(R, N, BM, BN, rng, shift=shift, gap=gap)


def _act(x, name):
    if name == "none":
        return x
    if name == "relu":
        return max(x, 0.0)
    if name == "silu":
        return x / (1.0 + math.exp(-x))
    if name == "gelu_tanh":
        return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def _direct(buf, table, R, N, BN, ops, bias, residual, weight):
    out = np.empty((R, N))
    pre = np.empty((R, N))
    for r in range(R):
        row = []
        for j in range(N):
            v = float(buf[table[r, j // BN] + j % BN])
            if ops.bias:
                v += float(bias[j])
            v = _act(v, ops.activation)
            if ops.residual:
                v += float(residual[r, j])
            row.append(v)
        pre[r] = row
        if ops.rmsnorm:
            inv = 1.0 / math.sqrt(sum(x * x for x in row) / N + ops.eps)
            out[r] = [row[j] * inv * float(weight[j]) for j in range(N)]
        else:
            out[r] = row
    return out, pre


OPS = [PostOps(), PostOps(bias=True), PostOps(activation="relu"), PostOps(activation="silu"),
       PostOps(activation="gelu_tanh"), PostOps(activation="gelu_erf"), PostOps(residual=True),
       PostOps(residual_out=True), PostOps(rmsnorm=True, eps=1e-5),
       PostOps(residual=True, residual_out=True, rmsnorm=True),
       PostOps(bias=True, activation="gelu_erf", residual=True, residual_out=True, rmsnorm=True)]


@pytest.mark.parametrize("ops", OPS, ids=lambda o: o.describe())
@pytest.mark.parametrize("R,N,BM,BN", [(5, 37, 2, 16), (1, 1, 16, 16), (9, 64, 4, 32), (3, 130, 8, 128)])
def test_reference_matches_direct_formula(R, N, BM, BN, ops):
    rng = np.random.default_rng(R * 1000 + N)
    table, size = tile_layout(R, N, BM, BN, rng)
    buf = np.full(size, np.nan)
    idx = table[:, np.arange(N) // BN] + np.arange(N) % BN
    assert len(np.unique(idx)) == R * N  # the layout is a bijection onto its slots
    buf[idx] = rng.standard_normal((R, N))
    bias = rng.standard_normal(N) if ops.bias else None
    residual = rng.standard_normal((R, N)) if ops.residual else None
    weight = rng.uniform(0.5, 1.5, N) if ops.rmsnorm else None
    res_out = np.full((R, N), np.nan) if ops.residual_out else None
    got = postops.post_reorder_reference(buf, table, (R, N), BN, ops, bias=bias, residual=residual,
                                         weight=weight, residual_out=res_out)
    want, pre = _direct(buf, table, R, N, BN, ops, bias, residual, weight)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if ops.residual_out:
        np.testing.assert_allclose(res_out, pre, rtol=1e-12, atol=1e-12)


def test_reference_agrees_with_reorder_module():
    from fo_lib import reorder
    rng = np.random.default_rng(3)
    R, N, BN = 7, 50, 16
    table, size = tile_layout(R, N, 4, BN, rng)
    C = rng.standard_normal((R, N))
    buf = reorder.pre_reorder(C, table, size, BN)
    np.testing.assert_array_equal(postops.gather_reference(buf, table, (R, N), BN), C)
    np.testing.assert_array_equal(postops.post_reorder_reference(buf, table, (R, N), BN), C)


def test_reference_rejects_bad_inputs():
    rng = np.random.default_rng(0)
    table, size = tile_layout(4, 20, 2, 8, rng)
    buf = rng.standard_normal(size)
    with pytest.raises(ValueError):  # operand missing
        postops.post_reorder_reference(buf, table, (4, 20), 8, PostOps(bias=True))
    with pytest.raises(ValueError):  # operand given but not enabled
        postops.post_reorder_reference(buf, table, (4, 20), 8, PostOps(), weight=np.ones(20))
    with pytest.raises(ValueError):  # wrong table width
        postops.post_reorder_reference(buf, table, (4, 20), 16)
    with pytest.raises(IndexError):  # table runs outside the buffer
        postops.post_reorder_reference(buf[:10], table, (4, 20), 8)
    with pytest.raises(ValueError):
        postops.post_reorder_reference(buf, table, (4, 20), 8, PostOps(bias=True), bias=np.ones(19))


def test_activation_reference_values():
    x = np.array([-3.0, -0.5, 0.0, 0.5, 3.0])
    for name in postops.ACTIVATIONS:
        got = postops.activation_reference(x, name)
        np.testing.assert_allclose(got, [_act(float(v), name) for v in x], rtol=1e-14, atol=1e-14)
    # tanh and erf GELU agree to ~1e-3
    np.testing.assert_allclose(postops.activation_reference(x, "gelu_tanh"),
                               postops.activation_reference(x, "gelu_erf"), atol=2e-3)


def test_import_without_torch_or_cupy():
    import subprocess
    import sys
    code = ("import sys; sys.modules['torch'] = None; sys.modules['cupy'] = None; "
            "import fo_lib.postops as p; print(p.PostOps(rmsnorm=True).describe())")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "rmsnorm" in res.stdout
