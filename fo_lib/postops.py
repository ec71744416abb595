"""Post-communication reorder fused with the element-wise epilogue.

``post_reorder.cuh`` (in ``fo_lib/cuda``) gathers the communication buffer back into row-major order through an
  int64 table and applies, in this order (fp32, each 16-bit result rounded once)::

      v = buf[src_offset[r, j // BN] + j % BN]
      v += bias[j]                      (PostOps.bias)
      v = activation(v)                 (PostOps.activation)
      v += residual[r, j]               (PostOps.residual)
      residual_out[r, j] = v            (PostOps.residual_out; may alias residual)
      out[r, j] = v * rsqrt(mean_j(v^2) + eps) * weight[j]   if PostOps.rmsnorm else v

The same kernel restores the ReduceScatter -> AllGather layout: only the table differs. With
``sources = W > 1`` it also finishes an AllReduce whose collective was an AllGather: every table
entry then has ``W`` copies in the buffer, copy ``s`` at ``src_offset + s * peer_stride`` (a second
table of the same shape), and ``v`` is their fp32 sum.

GPU entry points take torch CUDA tensors and launch through CuPy on the given torch stream. The
pure NumPy :func:`post_reorder_reference` computes the same math in float64 (tests, CPU engine).
torch and CuPy are imported lazily: ``import fo_lib.postops`` needs neither.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import kernels

# --- the fused operations ----------------------------------------------------------------------
ACTIVATIONS = ("none", "relu", "silu", "gelu_tanh", "gelu_erf")
_ACT_CODE = {name: i for i, name in enumerate(ACTIVATIONS)}  # must match fo::ACT_* in post_reorder.cuh
DTYPES = ("bf16", "f16")
_DTYPE_TAG = {"bf16": "fo::bf16_tag", "f16": "fo::f16_tag"}

CHUNK = 8                 # elements per thread-chunk (one 16-byte access on the vectorized path)
MAX_THREADS_PER_ROW = 1024
NORM_ITEMS = 4            # chunks per thread held in registers by the RMSNorm variant
MAX_NORM_N = MAX_THREADS_PER_ROW * NORM_ITEMS * CHUNK  # 32768: the row must fit in registers
MAX_N = 2**31 - 2**16     # int32 column indices in the kernel (with room for the last stripe)
MAX_SOURCES = 8           # copies summed per element (the world size of a gathered AllReduce)
_NONNORM_MAX_THREADS_PER_ROW = 512


@dataclass(frozen=True)
class PostOps:
    """Which element-wise operations the post-reorder kernel fuses (each a compile-time flag).

    ``activation`` is one of :data:`ACTIVATIONS` (``"gelu-tanh"`` style spellings are accepted and
    normalised). ``residual_out`` stores the pre-norm value (after bias, activation and residual);
    it may be the residual tensor itself (in-place update, as in fused add + RMSNorm).
    """

    bias: bool = False
    activation: str = "none"
    residual: bool = False
    residual_out: bool = False
    rmsnorm: bool = False
    eps: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("bias", "residual", "residual_out", "rmsnorm"):
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"PostOps.{name} must be a bool, got {value!r}")
            object.__setattr__(self, name, bool(value))
        if not isinstance(self.activation, str):
            raise TypeError(f"PostOps.activation must be a string, got {self.activation!r}")
        act = self.activation.strip().lower().replace("-", "_")
        if act not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; choose one of {ACTIVATIONS}")
        object.__setattr__(self, "activation", act)
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float, np.floating, np.integer)):
            raise TypeError(f"PostOps.eps must be a number, got {self.eps!r}")
        eps = float(self.eps)
        if not math.isfinite(eps) or eps < 0.0:
            raise ValueError(f"PostOps.eps must be finite and >= 0, got {self.eps!r}")
        if eps > 1e30:
            raise ValueError(f"PostOps.eps={eps} is too large for the fp32 kernel")
        object.__setattr__(self, "eps", eps)

    @property
    def is_identity(self) -> bool:
        """A plain gather: no element-wise work at all."""
        return not (self.bias or self.residual or self.residual_out or self.rmsnorm) and self.activation == "none"

    def describe(self) -> str:
        parts = []
        if self.bias:
            parts.append("bias")
        if self.activation != "none":
            parts.append(self.activation)
        if self.residual:
            parts.append("residual")
        if self.residual_out:
            parts.append("residual_out")
        if self.rmsnorm:
            parts.append(f"rmsnorm(eps={self.eps:g})")
        return "+".join(parts) or "gather"


def _check_dtype_name(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return dtype


def kernel_items(ops: PostOps) -> int:
    """Chunks per thread and loop step. RMSNorm keeps the row in registers (NORM_ITEMS); the
    streaming variants use 2 when a second input stream (bias/residual) would make 4 spill."""
    if ops.rmsnorm:
        return NORM_ITEMS
    return 2 if (ops.bias or ops.residual) else 4


def _nvrtc_has_maxnreg() -> bool:
    """``__maxnreg__`` exists from NVRTC 12.4 on (older ones get the 64-register launch bound)."""
    try:
        return kernels.nvrtc_version() >= (12, 4)
    except Exception:  # noqa: BLE001 - no CuPy here: the source is only shown, not compiled
        return True


def _check_sources(sources) -> int:
    if isinstance(sources, bool) or not isinstance(sources, (int, np.integer)) or not 1 <= sources <= MAX_SOURCES:
        raise ValueError(f"sources must be an integer in [1, {MAX_SOURCES}], got {sources!r}")
    return int(sources)


def generate_source(ops: PostOps, dtype: str, vectorized: bool, sources: int = 1) -> tuple[str, str]:
    """The NVRTC source of one post-reorder specialization and its ``extern "C"`` kernel name
    (``sources``: copies summed per element, see the module doc)."""
    if not isinstance(ops, PostOps):
        raise TypeError(f"ops must be a PostOps, got {type(ops).__name__}")
    _check_dtype_name(dtype)
    sources = _check_sources(sources)
    vectorized = bool(vectorized)
    items = kernel_items(ops)
    b = lambda flag: "true" if flag else "false"  # noqa: E731
    name = (f"fo_post_reorder_{dtype}_{'v' if vectorized else 's'}{items}_{ops.activation}"
            f"_b{int(ops.bias)}r{int(ops.residual)}o{int(ops.residual_out)}n{int(ops.rmsnorm)}"
            + (f"_w{sources}" if sources > 1 else ""))
    # NORM may need a 1024-thread row (the others stay <= 512): at most 64 registers. A plain
    # RMSNorm keeps its row as 16-bit values and fits 48 without spilling: 5 CTAs of 256 threads
    # per SM instead of 4 (post_reorder.cuh, kKeepRaw).
    plain_norm = (ops.rmsnorm and vectorized and not (ops.bias or ops.residual or ops.residual_out)
                  and ops.activation == "none" and sources == 1)
    bounds = ("__maxnreg__(48)" if plain_norm and _nvrtc_has_maxnreg()
              else f"__launch_bounds__({MAX_THREADS_PER_ROW})")
    source = f"""#include "post_reorder.cuh"
extern "C" __global__ void {bounds} {name}(
    const fo::bits16* buf, const fo::i64* src_offset, const fo::i64* peer_stride, fo::bits16* out,
    const fo::bits16* bias, const fo::bits16* residual, fo::bits16* residual_out, const fo::bits16* weight,
    int R, int N, int BN, int tiles_n, long long ldo, float eps) {{
  fo::post_reorder<{_DTYPE_TAG[dtype]}, {_ACT_CODE[ops.activation]}, {b(ops.bias)}, {b(ops.residual)},
                   {b(ops.residual_out)}, {b(ops.rmsnorm)}, {b(vectorized)}, {items}, {sources}>(
      buf, src_offset, peer_stride, out, bias, residual, residual_out, weight, R, N, BN, tiles_n, ldo, eps);
}}
"""
    return source, name


def compile_check_ops() -> list[tuple[str, PostOps]]:
    """The representative PostOps the compile check builds (every flag alone, all together)."""
    sets = [("gather", PostOps()), ("bias", PostOps(bias=True))]
    sets += [(act, PostOps(activation=act)) for act in ACTIVATIONS[1:]]
    sets += [("residual", PostOps(residual=True)), ("residual_out", PostOps(residual_out=True)),
             ("rmsnorm", PostOps(rmsnorm=True)),
             ("add_rmsnorm", PostOps(residual=True, residual_out=True, rmsnorm=True))]
    sets += [(f"all_{act}", PostOps(bias=True, activation=act, residual=True, residual_out=True, rmsnorm=True))
             for act in ("gelu_erf", "silu")]
    sets += [("all_nonorm", PostOps(bias=True, activation="gelu_tanh", residual=True, residual_out=True))]
    return sets


# (label, ops, sources) of the summing variants the compile check builds besides compile_check_ops.
SUMMED_CHECKS = (("sum2", PostOps(), 2), ("sum2_rmsnorm", PostOps(rmsnorm=True), 2),
                 ("sum8_all", PostOps(bias=True, activation="silu", residual=True, residual_out=True,
                                      rmsnorm=True), 8))


@kernels.register_compile_check
def _compile_checks():
    full = {"gather", "add_rmsnorm", "all_gelu_erf", "all_nonorm"}
    for i, (label, ops) in enumerate(compile_check_ops()):
        if label in full:  # both dtypes, both paths
            combos = [(d, v) for d in DTYPES for v in (True, False)]
        else:  # one dtype/path each, alternating, so each flag is seen on both sides overall
            combos = [(DTYPES[i % 2], bool((i // 2) % 2 == 0)), (DTYPES[(i + 1) % 2], bool((i // 2) % 2 == 1))]
        for dtype, vec in combos:
            source, _ = generate_source(ops, dtype, vec)
            yield f"post_reorder[{label},{dtype},{'vec' if vec else 'scalar'}]", source
    for label, ops, sources in SUMMED_CHECKS:
        for dtype, vec in ((d, v) for d in DTYPES for v in (True, False)):
            source, _ = generate_source(ops, dtype, vec, sources)
            yield f"post_reorder[{label},{dtype},{'vec' if vec else 'scalar'}]", source


# --- launch geometry (pure: tested on the CPU) ----------------------------------------------
def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class LaunchConfig:
    threads_per_row: int   # blockDim.x, a multiple of 32
    rows_per_cta: int      # blockDim.y
    grid_x: int            # ceil(R / rows_per_cta)
    grid_y: int            # column blocks per row (streaming variants only)
    items: int

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.threads_per_row, self.rows_per_cta, 1)

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.grid_x, self.grid_y, 1)


def launch_config(R: int, N: int, ops: PostOps, *, sm_count: int = 132,
                  threads_per_row: int | None = None) -> LaunchConfig:
    """Block/grid for an [R, N] post-reorder (same for both paths)."""
    if R <= 0 or N <= 0:
        raise ValueError(f"R and N must be positive, got R={R}, N={N}")
    items = kernel_items(ops)
    chunks = _ceil_div(N, CHUNK)
    cap = MAX_THREADS_PER_ROW if ops.rmsnorm else _NONNORM_MAX_THREADS_PER_ROW
    if threads_per_row is None:
        g = min(cap, 32 * _ceil_div(_ceil_div(chunks, items), 32))
    else:
        g = int(threads_per_row)
        if g <= 0 or g % 32 or g > cap:
            raise ValueError(f"threads_per_row must be a multiple of 32 in [32, {cap}], got {threads_per_row}")
    if ops.rmsnorm and g * items * CHUNK < N:
        raise ValueError(f"RMSNorm keeps a row in registers: N={N} needs threads_per_row >= "
                         f"{_ceil_div(chunks, items)} (at most N={MAX_NORM_N} is supported)")
    if threads_per_row is None and ops.rmsnorm:
        # Few rows: spread each row over more threads (fewer chunks each) to put more CTAs in flight.
        while 2 * g <= min(cap, 32 * _ceil_div(chunks, 32)) and _ceil_div(R, max(1, 256 // g)) < 2 * sm_count:
            g *= 2
    rows = max(1, 256 // g)
    grid_x = _ceil_div(R, rows)
    grid_y = 1
    if not ops.rmsnorm:
        steps = _ceil_div(chunks, g * items)  # loop iterations of one row
        if steps > 1 and grid_x < 2 * sm_count:
            grid_y = min(steps, max(1, (2 * sm_count) // grid_x), 65535)
    return LaunchConfig(g, rows, grid_x, grid_y, items)


# --- NumPy reference (float64) -------------------------------------------------------------
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
    from .reorder import element_index

    R, N = (int(v) for v in out_shape)
    sources = _check_sources(sources)
    if (peer_stride is None) != (sources == 1):
        raise ValueError("peer_stride goes with sources > 1 (and only then)")
    buf = np.asarray(buf).reshape(-1)
    shape = (R, _ceil_div(N, BN))
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
    _require(ops.bias, bias, "bias")
    _require(ops.residual, residual, "residual")
    _require(ops.rmsnorm, weight, "weight")
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


def _require(flag: bool, value, name: str) -> None:
    if flag and value is None:
        raise ValueError(f"PostOps enables {name} but no {name} was given")
    if not flag and value is not None:
        raise ValueError(f"{name} was given but PostOps does not enable it")


def _as_f64(a, shape: tuple[int, ...], name: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
    return a


# --- GPU launch ------------------------------------------------------------------------------
def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise kernels.CudaUnavailableError("the GPU entry points take torch tensors: install torch") from exc
    return torch


def _cupy():
    return kernels._cupy()


_TORCH_DTYPE_NAMES = {"bfloat16": "bf16", "float16": "f16"}


def _dtype_name(t, what: str) -> str:
    name = str(t.dtype).replace("torch.", "")
    if name not in _TORCH_DTYPE_NAMES:
        raise TypeError(f"{what} must be bfloat16 or float16, got {t.dtype}")
    return _TORCH_DTYPE_NAMES[name]


_check_cuda = kernels.check_cuda_tensor


def _span(t, elements: int) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + elements * t.element_size()


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return int(_cupy().cuda.runtime.getDeviceProperties(device_index)["multiProcessorCount"])


_ptr = kernels.ptr


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
    ``prepared``: the packed :class:`~fo_lib.kernels.PreparedLaunch` (None when there are no rows);
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
# the checks and the argument packing (kernels.LaunchMemo).
_LAUNCHES = kernels.LaunchMemo()


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
    torch = _torch()
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
    sources = _check_sources(sources)
    operands = (buf, src_offset, bias, residual, residual_out, weight, peer_stride)
    key = None if check_table else kernels.memo_key((ops, R, N, BN, vectorized, threads_per_row, sources),
                                                    *operands, out)
    hit = _LAUNCHES.get(key)
    if hit is None:
        hit = _checked_launch(buf, src_offset, R, N, BN, ops, bias, residual, residual_out, weight, out,
                              vectorized, check_table, threads_per_row, sources, peer_stride)
        _LAUNCHES.put(key, hit)
    prepared, vectorized, cfg = hit
    return PostReorderLaunch(prepared, stream, out.device.index, out, vectorized, cfg, keep=operands)


def _checked_launch(buf, src_offset, R, N, BN, ops, bias, residual, residual_out, weight, out, vectorized,
                    check_table, threads_per_row, sources=1, peer_stride=None):
    """Check every operand of :func:`post_reorder_launcher` and pack the launch:
    ``(PreparedLaunch or None, vectorized, LaunchConfig or None)``."""
    torch = _torch()
    # buffer and table
    _check_cuda(buf, "buf", None)
    device = buf.device
    dtype = _dtype_name(buf, "buf")
    if not buf.is_contiguous():
        raise ValueError("buf must be contiguous")
    _check_cuda(src_offset, "src_offset", device)
    if src_offset.dtype != torch.int64:
        raise TypeError(f"src_offset must be int64, got {src_offset.dtype}")
    tiles_n = _ceil_div(N, BN)
    if tuple(src_offset.shape) != (R, tiles_n):
        raise ValueError(f"src_offset must have shape (R, ceil(N/BN)) = {(R, tiles_n)}, got {tuple(src_offset.shape)}")
    if not src_offset.is_contiguous():
        raise ValueError("src_offset must be contiguous")
    if (peer_stride is None) != (sources == 1):
        raise ValueError("peer_stride goes with sources > 1 (and only then)")
    if peer_stride is not None:
        _check_cuda(peer_stride, "peer_stride", device)
        if peer_stride.dtype != torch.int64 or tuple(peer_stride.shape) != (R, tiles_n) \
                or not peer_stride.is_contiguous():
            raise ValueError(f"peer_stride must be a contiguous int64 tensor of shape {(R, tiles_n)}, got "
                             f"{peer_stride.dtype} {tuple(peer_stride.shape)}")

    # operands present iff enabled
    def operand(flag, t, name, shape):
        _require(flag, t, name)
        if t is None:
            return None
        _check_cuda(t, name, device)
        if t.dtype != buf.dtype:
            raise TypeError(f"{name} has dtype {t.dtype}, buf has {buf.dtype}")
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
        return t

    bias = operand(ops.bias, bias, "bias", (N,))
    residual = operand(ops.residual, residual, "residual", (R, N))
    residual_out = operand(ops.residual_out, residual_out, "residual_out", (R, N))
    weight = operand(ops.rmsnorm, weight, "weight", (N,))

    # out (allocated by the caller when None)
    _check_cuda(out, "out", device)
    if out.dtype != buf.dtype:
        raise TypeError(f"out has dtype {out.dtype}, buf has {buf.dtype}")
    if out.dim() != 2 or tuple(out.shape) != (R, N):
        raise ValueError(f"out must have shape {(R, N)}, got {tuple(out.shape)}")
    if out.stride(1) != 1 or (R > 1 and out.stride(0) < N):
        raise ValueError(f"out must be row-major with unit column stride and row stride >= N, "
                         f"got strides {out.stride()}")
    ldo = out.stride(0) if R > 1 else max(out.stride(0), N)
    # stream None: the launch goes to whatever stream is current when it is called (so a launcher
    # made outside a CUDA-graph capture is captured when called inside it).
    if R == 0:
        return None, False, None

    # aliasing: out is written by other threads than those reading the inputs
    out_span = _span(out, (R - 1) * ldo + N)
    inputs = [("buf", buf, buf.numel()), ("src_offset", src_offset, src_offset.numel()),
              ("peer_stride", peer_stride, src_offset.numel()),
              ("bias", bias, N), ("residual", residual, R * N), ("weight", weight, N)]
    for name, t, n in inputs:
        if t is not None and _overlap(out_span, _span(t, n)):
            raise ValueError(f"out overlaps {name}")
    if residual_out is not None:
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

    # path
    ptrs = [t.data_ptr() for t in (buf, out, bias, residual, residual_out, weight) if t is not None]
    can_vec = BN % CHUNK == 0 and N % CHUNK == 0 and ldo % CHUNK == 0 and all(p % 16 == 0 for p in ptrs)
    if vectorized is None:
        vectorized = can_vec
    elif vectorized and not can_vec:
        raise ValueError("the vectorized path needs BN, N and the out row stride to be multiples of 8 and "
                         "16-byte aligned buf/out/bias/residual/residual_out/weight")
    vectorized = bool(vectorized)

    if check_table:
        for s in range(sources):
            check_table_bounds(src_offset if s == 0 else src_offset + s * peer_stride, N, BN, buf.numel())

    cfg = launch_config(R, N, ops, sm_count=_sm_count(device.index), threads_per_row=threads_per_row)
    source, name = generate_source(ops, dtype, vectorized, sources)
    with _cupy().cuda.Device(device.index):
        kernel = kernels.get_kernel(source, name)
    args = (_ptr(buf), _ptr(src_offset), _ptr(peer_stride), _ptr(out), _ptr(bias), _ptr(residual), _ptr(residual_out), _ptr(weight),
            np.int32(R), np.int32(N), np.int32(BN), np.int32(tiles_n), np.int64(ldo), np.float32(ops.eps))
    return kernels.PreparedLaunch(kernel, cfg.grid, cfg.block, args, device_index=device.index), vectorized, cfg


def check_table_bounds(src_offset, N: int, BN: int, buf_elements: int) -> None:
    """Raise ValueError unless every run ``[src_offset[r, t], + min(BN, N - t BN))`` lies in the
    buffer (a device reduction and one sync)."""
    torch = _torch()
    tiles_n = _ceil_div(N, BN)
    t = torch.arange(tiles_n, device=src_offset.device, dtype=torch.int64)
    run = torch.clamp(N - t * BN, max=BN)
    bad = (src_offset < 0) | (src_offset + run[None, :] > buf_elements)
    if bool(bad.any()):
        r, c = (int(v) for v in bad.nonzero()[0])
        raise ValueError(f"src_offset[{r}, {c}] = {int(src_offset[r, c])} addresses a run of {int(run[c])} "
                         f"elements outside buf ({buf_elements} elements)")
