"""The post-reorder's math in float64 with NumPy: the oracle of the GPU tests and the CPU engine's
own post step. No rounding anywhere (the kernel rounds each 16-bit result once)."""
from __future__ import annotations

import math

import numpy as np

from .._util import ceil_div
from ..reorder import element_index
from .spec import PostOps, check_sources, require_operand

_erf_vec = np.frompyfunc(math.erf, 1, 1)


def activation_reference(x: np.ndarray, activation: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    act = PostOps(activation=activation).activation
    if act == "none":
        return x.copy()
    if act == "relu":
        return np.maximum(x, 0.0)
    if act == "silu":
        with np.errstate(over="ignore"):
            return x / (1.0 + np.exp(-x))
    if act == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf_vec(x / math.sqrt(2.0)).astype(np.float64))


def gather_reference(buf: np.ndarray, src_offset: np.ndarray, out_shape: tuple[int, int], BN: int,
                     sources: int = 1, peer_stride: np.ndarray | None = None) -> np.ndarray:
    """``out[r, j] = sum_s buf[src_offset[r, j // BN] + s * peer_stride[r, j // BN] + j % BN]`` over
    ``s < sources`` (any dtype; float64 result; ``peer_stride`` only with ``sources > 1``)."""
    R, N = (int(v) for v in out_shape)
    sources = check_sources(sources)
    if (peer_stride is None) != (sources == 1):
        raise ValueError("peer_stride goes with sources > 1 (and only then)")
    buf = np.asarray(buf).reshape(-1)
    shape = (R, ceil_div(N, BN))
    table = np.asarray(src_offset, dtype=np.int64)
    if table.size != R * shape[1]:
        raise ValueError(f"table has {table.size} entries, expected R * ceil(N/BN) = {R} x {shape[1]}")
    stride = np.zeros(shape, np.int64) if peer_stride is None else np.asarray(peer_stride, np.int64)
    if stride.size != table.size:
        raise ValueError(f"peer_stride has {stride.size} entries, the table {table.size}")
    out = np.zeros((R, N))
    for s in range(sources):
        idx = element_index(table.reshape(shape) + s * stride.reshape(shape), N, BN)
        if idx.size and (idx.min() < 0 or idx.max() >= buf.size):
            raise IndexError(f"table addresses [{idx.min()}, {idx.max()}] outside buf of {buf.size} elements")
        out += buf[idx].astype(np.float64)
    return out


def post_reorder_reference(buf: np.ndarray, src_offset: np.ndarray, out_shape: tuple[int, int], BN: int,
                           ops: PostOps = PostOps(), *, bias: np.ndarray | None = None,
                           residual: np.ndarray | None = None, weight: np.ndarray | None = None,
                           residual_out: np.ndarray | None = None, sources: int = 1,
                           peer_stride: np.ndarray | None = None) -> np.ndarray:
    """The post-reorder math in float64 (no rounding). Returns ``out`` [R, N].
    ``sources``/``peer_stride``: the copies summed per element (:func:`gather_reference`).

    When ``ops.residual_out`` is set, ``residual_out`` (an [R, N] array) receives the pre-norm
    values, as on the GPU; it may be omitted in the reference.
    """
    R, N = (int(v) for v in out_shape)
    require_operand(ops.bias, bias, "bias")
    require_operand(ops.residual, residual, "residual")
    require_operand(ops.rmsnorm, weight, "weight")
    v = gather_reference(buf, src_offset, (R, N), BN, sources, peer_stride)
    if ops.bias:
        v = v + _as_f64(bias, (N,), "bias")[None, :]
    v = activation_reference(v, ops.activation)
    if ops.residual:
        v = v + _as_f64(residual, (R, N), "residual")
    if residual_out is not None:
        if not ops.residual_out:
            raise ValueError("residual_out given but ops.residual_out is False")
        residual_out[...] = v
    if ops.rmsnorm:
        w = _as_f64(weight, (N,), "weight")
        inv = 1.0 / np.sqrt(np.mean(v * v, axis=1, keepdims=True) + ops.eps)
        v = v * inv * w[None, :]
    return v


def _as_f64(a, shape: tuple[int, ...], name: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
    return a
