"""The operand checks both GEMM families run before a launch: dtype, shape, strides, alignment,
the output, and the tables of the table-store epilogues. Each failure is a :class:`GemmError` that
names the operand and the fix. torch is imported when a check runs."""
from __future__ import annotations

from .._util import ceil_div, device_limits
from .config import GemmError


def dtype_name(t) -> str:
    import torch
    if t.dtype == torch.bfloat16:
        return "bf16"
    if t.dtype == torch.float16:
        return "f16"
    raise GemmError(f"only bfloat16 and float16 are supported, got {t.dtype}")


def check_matrix(t, name: str, rows: int | None = None) -> None:
    import torch
    if not isinstance(t, torch.Tensor):
        raise GemmError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_cuda:
        raise GemmError(f"{name} must be on a CUDA device, got {t.device}")
    if t.dim() != 2:
        raise GemmError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    if t.stride(1) != 1:
        raise GemmError(f"{name} must have unit stride in its last dimension, got strides {t.stride()}")
    if t.size(0) > 1 and t.stride(0) < t.size(1):
        raise GemmError(f"{name} rows overlap (stride {t.stride(0)} < {t.size(1)} columns)")
    if t.data_ptr() % 16:
        raise GemmError(f"{name} must be 16-byte aligned (data_ptr % 16 = {t.data_ptr() % 16})")
    if rows is not None and t.size(0) != rows:
        raise GemmError(f"{name} must have {rows} rows, got {t.size(0)}")


def check_operands(a, b, config, ctas: int | None, pick_default):
    """Validate ``a``, ``b``, ``config`` and ``ctas``; returns ``(dtype, M, N, K, config, ctas)``.
    ``pick_default(M, N, K, sm_count, smem_limit)`` chooses the config when ``config`` is None (each
    family passes its own ``default_config``)."""
    check_matrix(a, "a")
    check_matrix(b, "b")
    dtype = dtype_name(a)
    if b.dtype != a.dtype:
        raise GemmError(f"a and b must have the same dtype, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise GemmError(f"a and b must be on the same device, got {a.device} and {b.device}")
    M, K = a.shape
    N, Kb = b.shape
    if K != Kb:
        raise GemmError(f"K mismatch: a is {tuple(a.shape)} (M x K), b is {tuple(b.shape)} (N x K)")
    if M == 0 or N == 0 or K == 0:
        raise GemmError(f"empty GEMM M={M} N={N} K={K} is not supported")
    if K % 8:
        raise GemmError(f"K must be a multiple of 8 (16-byte cp.async rows), got K={K}")
    for t, name in ((a, "a"), (b, "b")):
        if t.size(0) > 1 and t.stride(0) % 8:
            raise GemmError(f"{name} row stride must be a multiple of 8 elements, got {t.stride(0)}")
    dev_index = a.device.index
    sms, smem_limit = device_limits(dev_index)
    cfg = pick_default(M, N, K, sms, smem_limit) if config is None else config
    cfg.validate()
    if cfg.smem_bytes > smem_limit:
        raise GemmError(f"config {cfg.tile_name} needs {cfg.smem_bytes} B of shared memory; "
                        f"{a.device} allows {smem_limit} B per block")
    if ctas is None:
        ctas = sms
    if not isinstance(ctas, int) or isinstance(ctas, bool) or ctas <= 0:
        raise GemmError(f"ctas must be a positive int, got {ctas!r}")
    return dtype, M, N, K, cfg, ctas


def check_out(out, M: int, N: int, a, name: str = "out") -> None:
    check_matrix(out, name, rows=M)
    if out.size(1) != N:
        raise GemmError(f"{name} must be {M} x {N}, got {tuple(out.shape)}")
    if out.dtype != a.dtype or out.device != a.device:
        raise GemmError(f"{name} must be {a.dtype} on {a.device}, got {out.dtype} on {out.device}")


def check_table_store(a, comm_buf, row_offset, tile_group, group_counter, cfg, M, N, tile_place=None) -> None:
    """Validate the communication buffer and tables of the table-store epilogues."""
    import torch
    tiles_m, tiles_n = ceil_div(M, cfg.BM), ceil_div(N, cfg.BN)
    if not isinstance(comm_buf, torch.Tensor) or not comm_buf.is_cuda:
        raise GemmError("comm_buf must be a CUDA torch.Tensor")
    if comm_buf.dtype != a.dtype or comm_buf.device != a.device:
        raise GemmError(f"comm_buf must be {a.dtype} on {a.device}, got {comm_buf.dtype} on {comm_buf.device}")
    if not comm_buf.is_contiguous():
        raise GemmError("comm_buf must be contiguous (row_offset indexes its flat storage)")
    if comm_buf.numel() < M * N:
        raise GemmError(f"comm_buf holds {comm_buf.numel()} elements, fewer than M*N = {M * N}")
    checks = [] if row_offset is None else [(row_offset, "row_offset", (torch.int64,), (M, tiles_n))]
    if tile_place is not None:
        checks.append((tile_place, "tile_place", (torch.int64,), (tiles_m * tiles_n, 4)))
        if isinstance(tile_place, torch.Tensor) and tile_place.data_ptr() % 16:
            raise GemmError("tile_place must be 16-byte aligned (each tile's place is read as two 16-byte chunks)")
    if group_counter is not None:
        checks += [(tile_group, "tile_group", (torch.int32,), (tiles_m * tiles_n,)),
                   (group_counter, "group_counter", (torch.int32, torch.uint32), None)]
    for t, name, dt, shape in checks:
        if not isinstance(t, torch.Tensor):
            raise GemmError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device != a.device:
            raise GemmError(f"{name} must be on {a.device}, got {t.device}")
        if t.dtype not in dt:
            raise GemmError(f"{name} must be {' or '.join(map(str, dt))}, got {t.dtype}")
        if not t.is_contiguous():
            raise GemmError(f"{name} must be contiguous")
        if shape is not None and tuple(t.shape) != shape:
            raise GemmError(f"{name} must have shape {shape} for {M}x{N} in {cfg.BM}x{cfg.BN} tiles "
                            f"({tiles_m}x{tiles_n}), got {tuple(t.shape)}")
    if group_counter is not None and (group_counter.dim() != 1 or group_counter.numel() == 0):
        raise GemmError(f"group_counter must be a non-empty 1-D tensor, got shape {tuple(group_counter.shape)}")


def is_matrix(t) -> bool:
    import torch
    return isinstance(t, torch.Tensor) and t.dim() == 2


def output(out, M, N, a):
    """``out`` checked, or a new ``M x N`` tensor like ``a``."""
    if out is None:
        import torch
        return torch.empty(M, N, dtype=a.dtype, device=a.device)
    check_out(out, M, N, a)
    return out
