"""Launching the post-reorder on the GPU: the operand checks, :func:`post_reorder` (check and
enqueue) and :func:`post_reorder_launcher` (check once, enqueue on every call). torch and CuPy are
imported when a launch is built."""
from __future__ import annotations

import numpy as np

from .._util import ceil_div, device_limits, require_cupy, require_torch
from ..jit import LaunchMemo, PreparedLaunch, check_cuda_tensor, get_kernel, memo_key, ptr
from .kernel import LaunchConfig, generate_source, launch_config
from .spec import CHUNK, MAX_N, MAX_NORM_N, PostOps, check_sources, require_operand

_TORCH_DTYPE_NAMES = {"bfloat16": "bf16", "float16": "f16"}


def _dtype_name(t, what: str) -> str:
    name = str(t.dtype).replace("torch.", "")
    if name not in _TORCH_DTYPE_NAMES:
        raise TypeError(f"{what} must be bfloat16 or float16, got {t.dtype}")
    return _TORCH_DTYPE_NAMES[name]


def _span(t, elements: int) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + elements * t.element_size()


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def post_reorder(buf, src_offset, out_shape, BN: int, ops: PostOps = PostOps(), *, bias=None, residual=None,
                 residual_out=None, weight=None, out=None, stream=None, vectorized: bool | None = None,
                 check_table: bool = False, threads_per_row: int | None = None, sources: int = 1,
                 peer_stride=None):
    """Gather ``buf`` through ``src_offset`` into row-major ``out`` [R, N], fused with ``ops``; see
    :func:`post_reorder_launcher` for the arguments. Validates, launches on ``stream`` (default: the
    current torch stream) and returns ``out``."""
    launch = post_reorder_launcher(buf, src_offset, out_shape, BN, ops, bias=bias, residual=residual,
                                   residual_out=residual_out, weight=weight, out=out, stream=stream,
                                   vectorized=vectorized, check_table=check_table, threads_per_row=threads_per_row,
                                   sources=sources, peer_stride=peer_stride)
    launch()
    return launch.out


class PostReorderLaunch:
    """A validated post-reorder launch with fixed operands (hot loops, CUDA-graph capture): calling
    it enqueues the kernel on its stream (or on ``stream`` if given). ``out`` is the output tensor.
    ``prepared``: the packed :class:`~fo_lib.jit.PreparedLaunch` (None when there are no rows);
    ``keep``: the operands whose addresses it holds, kept alive with this object."""

    def __init__(self, prepared, stream, device_index: int, out, vectorized: bool,
                 config: "LaunchConfig | None", keep: tuple = ()):
        self.prepared, self.stream, self.device_index, self.out = prepared, stream, device_index, out
        self.vectorized, self.config = vectorized, config
        self._keep = keep

    def __call__(self, stream=None) -> None:
        if self.prepared is not None:
            self.prepared(self.stream if stream is None else stream)


# Validated launches by their operands' signatures: an engine plan's per-call post-reorder skips
# the checks and the argument packing (fo_lib.jit.LaunchMemo).
_LAUNCHES = LaunchMemo()


def post_reorder_launcher(buf, src_offset, out_shape, BN: int, ops: PostOps = PostOps(), *, bias=None,
                          residual=None, residual_out=None, weight=None, out=None, stream=None,
                          vectorized: bool | None = None, check_table: bool = False,
                          threads_per_row: int | None = None, sources: int = 1,
                          peer_stride=None) -> PostReorderLaunch:
    """Validate a post-reorder and return it as a callable launch (nothing is enqueued yet).

    Gather ``buf`` through ``src_offset`` into row-major ``out`` [R, N], fused with ``ops``.

    ``buf``: 16-bit CUDA tensor (any shape, contiguous). ``src_offset``: int64 [R, ceil(N/BN)].
    ``bias``/``weight``: [N]; ``residual``/``residual_out``: [R, N] contiguous (``residual_out`` may be
    ``residual``). ``out``: [R, N] with unit column stride (row stride ``ldo >= N``), allocated when
    None. ``vectorized``: None picks the 16-byte path when BN, N, ldo are multiples of 8 and every
    pointer is 16-byte aligned; True demands it, False forces the scalar path. ``check_table`` also
    checks (with a device sync) that every table run lies inside ``buf``. ``threads_per_row``
    overrides the block width (a multiple of 32; tuning). ``sources > 1`` sums that many copies
    per element, copy ``s`` at ``src_offset + s * peer_stride`` (``peer_stride``: int64, the
    table's shape). The launch keeps references to every operand, so they stay allocated while it
    lives.
    """
    torch = require_torch()
    if not isinstance(ops, PostOps):
        raise TypeError(f"ops must be a PostOps, got {type(ops).__name__}")
    try:
        R, N = (int(v) for v in out_shape)
    except (TypeError, ValueError):
        raise ValueError(f"out_shape must be (R, N), got {out_shape!r}") from None
    if isinstance(BN, bool) or not isinstance(BN, (int, np.integer)) or BN <= 0:
        raise ValueError(f"BN must be a positive integer, got {BN!r}")
    BN = int(BN)
    if R < 0 or N <= 0:
        raise ValueError(f"out_shape must have R >= 0 and N >= 1, got {(R, N)}")
    if N > MAX_N or R >= 2**31:
        raise ValueError(f"out_shape {(R, N)} exceeds the kernel's int32 indexing")
    if ops.rmsnorm and N > MAX_NORM_N:
        raise ValueError(f"RMSNorm supports N <= {MAX_NORM_N} (the row is kept in registers), got N={N}")
    if out is None and isinstance(buf, torch.Tensor) and buf.is_cuda:
        out = torch.empty((R, N), dtype=buf.dtype, device=buf.device)
    sources = check_sources(sources)
    operands = (buf, src_offset, bias, residual, residual_out, weight, peer_stride)
    key = None if check_table else memo_key((ops, R, N, BN, vectorized, threads_per_row, sources), *operands, out)
    hit = _LAUNCHES.get(key)
    if hit is None:
        hit = _checked_launch(buf, src_offset, R, N, BN, ops, bias, residual, residual_out, weight, out,
                              vectorized, check_table, threads_per_row, sources, peer_stride)
        _LAUNCHES.put(key, hit)
    prepared, vectorized, cfg = hit
    return PostReorderLaunch(prepared, stream, out.device.index, out, vectorized, cfg, keep=operands)


# --- the checks of one launch, in the order _checked_launch runs them ------------------------------
def _check_buffer_and_tables(buf, src_offset, peer_stride, R: int, tiles_n: int, sources: int) -> str:
    """``buf`` and the tables that address it; returns ``buf``'s dtype name."""
    torch = require_torch()
    check_cuda_tensor(buf, "buf", None)
    device = buf.device
    dtype = _dtype_name(buf, "buf")
    if not buf.is_contiguous():
        raise ValueError("buf must be contiguous")
    check_cuda_tensor(src_offset, "src_offset", device)
    if src_offset.dtype != torch.int64:
        raise TypeError(f"src_offset must be int64, got {src_offset.dtype}")
    if tuple(src_offset.shape) != (R, tiles_n):
        raise ValueError(f"src_offset must have shape (R, ceil(N/BN)) = {(R, tiles_n)}, got {tuple(src_offset.shape)}")
    if not src_offset.is_contiguous():
        raise ValueError("src_offset must be contiguous")
    if (peer_stride is None) != (sources == 1):
        raise ValueError("peer_stride goes with sources > 1 (and only then)")
    if peer_stride is not None:
        check_cuda_tensor(peer_stride, "peer_stride", device)
        if peer_stride.dtype != torch.int64 or tuple(peer_stride.shape) != (R, tiles_n) \
                or not peer_stride.is_contiguous():
            raise ValueError(f"peer_stride must be a contiguous int64 tensor of shape {(R, tiles_n)}, got "
                             f"{peer_stride.dtype} {tuple(peer_stride.shape)}")
    return dtype


def _check_fused_operand(flag: bool, t, name: str, shape: tuple[int, ...], buf):
    """An operand of a fused op: present exactly when ``flag`` enables it, shaped and typed like ``buf``."""
    require_operand(flag, t, name)
    if t is None:
        return None
    check_cuda_tensor(t, name, buf.device)
    if t.dtype != buf.dtype:
        raise TypeError(f"{name} has dtype {t.dtype}, buf has {buf.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    return t


def _check_out(out, buf, R: int, N: int) -> int:
    """``out`` (allocated by the caller when None); returns its row stride ``ldo``."""
    check_cuda_tensor(out, "out", buf.device)
    if out.dtype != buf.dtype:
        raise TypeError(f"out has dtype {out.dtype}, buf has {buf.dtype}")
    if out.dim() != 2 or tuple(out.shape) != (R, N):
        raise ValueError(f"out must have shape {(R, N)}, got {tuple(out.shape)}")
    if out.stride(1) != 1 or (R > 1 and out.stride(0) < N):
        raise ValueError(f"out must be row-major with unit column stride and row stride >= N, "
                         f"got strides {out.stride()}")
    return out.stride(0) if R > 1 else max(out.stride(0), N)


def _check_no_alias(out, ldo: int, residual_out, inputs, R: int, N: int) -> None:
    """``out`` and ``residual_out`` are written by other threads than those reading the inputs, so
    neither may overlap an input; ``residual_out`` may only be ``residual`` itself (the in-place
    update). ``inputs``: ``(name, tensor or None, elements)``."""
    out_span = _span(out, (R - 1) * ldo + N)
    for name, t, n in inputs:
        if t is not None and _overlap(out_span, _span(t, n)):
            raise ValueError(f"out overlaps {name}")
    if residual_out is None:
        return
    ro_span = _span(residual_out, R * N)
    if _overlap(ro_span, out_span):
        raise ValueError("residual_out overlaps out")
    for name, t, n in inputs:
        if t is None:
            continue
        if name == "residual" and t.data_ptr() == residual_out.data_ptr():
            continue  # exact alias: the in-place residual update is supported
        if _overlap(ro_span, _span(t, n)):
            raise ValueError(f"residual_out overlaps {name}" + (" (only an exact alias of residual is allowed)"
                                                                 if name == "residual" else ""))


def _choose_path(vectorized: bool | None, BN: int, N: int, ldo: int, tensors) -> bool:
    """The 16-byte path when asked for or (``vectorized=None``) when every size and pointer allows it."""
    ptrs = [t.data_ptr() for t in tensors if t is not None]
    can_vec = BN % CHUNK == 0 and N % CHUNK == 0 and ldo % CHUNK == 0 and all(p % 16 == 0 for p in ptrs)
    if vectorized is None:
        return can_vec
    if vectorized and not can_vec:
        raise ValueError("the vectorized path needs BN, N and the out row stride to be multiples of 8 and "
                         "16-byte aligned buf/out/bias/residual/residual_out/weight")
    return bool(vectorized)


def _checked_launch(buf, src_offset, R, N, BN, ops, bias, residual, residual_out, weight, out, vectorized,
                    check_table, threads_per_row, sources=1, peer_stride=None):
    """Check every operand of :func:`post_reorder_launcher` and pack the launch:
    ``(PreparedLaunch or None, vectorized, LaunchConfig or None)``."""
    tiles_n = ceil_div(N, BN)
    dtype = _check_buffer_and_tables(buf, src_offset, peer_stride, R, tiles_n, sources)
    bias = _check_fused_operand(ops.bias, bias, "bias", (N,), buf)
    residual = _check_fused_operand(ops.residual, residual, "residual", (R, N), buf)
    residual_out = _check_fused_operand(ops.residual_out, residual_out, "residual_out", (R, N), buf)
    weight = _check_fused_operand(ops.rmsnorm, weight, "weight", (N,), buf)
    ldo = _check_out(out, buf, R, N)
    # No stream is bound here: the launch goes to whatever stream is current when it is called (so a
    # launcher made outside a CUDA-graph capture is captured when called inside it).
    if R == 0:
        return None, False, None
    _check_no_alias(out, ldo, residual_out, [
        ("buf", buf, buf.numel()), ("src_offset", src_offset, src_offset.numel()),
        ("peer_stride", peer_stride, src_offset.numel()),
        ("bias", bias, N), ("residual", residual, R * N), ("weight", weight, N)], R, N)
    vectorized = _choose_path(vectorized, BN, N, ldo, (buf, out, bias, residual, residual_out, weight))
    if check_table:
        for s in range(sources):
            check_table_bounds(src_offset if s == 0 else src_offset + s * peer_stride, N, BN, buf.numel())

    device = buf.device.index
    cfg = launch_config(R, N, ops, sm_count=device_limits(device)[0], threads_per_row=threads_per_row)
    source, name = generate_source(ops, dtype, vectorized, sources)
    with require_cupy().cuda.Device(device):
        kernel = get_kernel(source, name)
    args = (ptr(buf), ptr(src_offset), ptr(peer_stride), ptr(out), ptr(bias), ptr(residual), ptr(residual_out),
            ptr(weight), np.int32(R), np.int32(N), np.int32(BN), np.int32(tiles_n), np.int64(ldo),
            np.float32(ops.eps))
    return PreparedLaunch(kernel, cfg.grid, cfg.block, args, device_index=device), vectorized, cfg


def check_table_bounds(src_offset, N: int, BN: int, buf_elements: int) -> None:
    """Raise ValueError unless every run ``[src_offset[r, t], + min(BN, N - t BN))`` lies in the
    buffer (a device reduction and one sync)."""
    torch = require_torch()
    tiles_n = ceil_div(N, BN)
    t = torch.arange(tiles_n, device=src_offset.device, dtype=torch.int64)
    run = torch.clamp(N - t * BN, max=BN)
    bad = (src_offset < 0) | (src_offset + run[None, :] > buf_elements)
    if bool(bad.any()):
        r, c = (int(v) for v in bad.nonzero()[0])
        raise ValueError(f"src_offset[{r}, {c}] = {int(src_offset[r, c])} addresses a run of {int(run[c])} "
                         f"elements outside buf ({buf_elements} elements)")
