"""TMA tensor maps for the Hopper GEMM (``cuTensorMapEncodeTiled`` through cuda-bindings): the
geometry of a row-major operand read in boxes of 64 16-bit elements x ``box_rows`` rows, 128-byte
swizzled, zero-filled out of bounds, and the encoded maps, cached.

``import fo_lib.gemm.tma`` needs neither torch, CuPy nor cuda-bindings; they are imported when a map
is built.
"""
from __future__ import annotations

from functools import lru_cache

from .._util import CudaUnavailableError, ceil_div
from .config import GemmError


def tma_desc_fields(rows: int, cols: int, row_stride: int, box_rows: int, box_cols: int = 64,
                    elem_bytes: int = 2) -> dict:
    """The ``cuTensorMapEncodeTiled`` geometry of a row-major ``rows x cols`` matrix read in
    ``box_rows x box_cols`` boxes (dimension 0 is the contiguous one). Pure; raises GemmError
    where the driver would refuse."""
    if min(rows, cols, box_rows, box_cols) <= 0:
        raise GemmError(f"tensor map of a {rows} x {cols} matrix in {box_rows} x {box_cols} boxes is empty")
    # A single row's stride is never used, but it must still be a legal multiple of 16 bytes.
    stride = row_stride if rows > 1 else ceil_div(cols, 8) * 8
    stride_bytes = stride * elem_bytes
    if stride_bytes % 16 or stride < cols:
        raise GemmError(f"tensor map row stride {stride} elements must be >= {cols} and a multiple of "
                        f"{16 // elem_bytes}")
    if box_rows > 256 or box_cols > 256 or box_cols * elem_bytes > 128:
        raise GemmError(f"TMA box {box_rows} x {box_cols} exceeds 256 rows or the 128-byte swizzle span")
    if cols >= 2**32 or rows >= 2**32 or stride_bytes >= 2**40:
        raise GemmError(f"{rows} x {cols} (stride {stride}) is too large for a tensor map")
    return dict(global_dim=(cols, rows), global_strides=(stride_bytes,), box_dim=(box_cols, box_rows),
                element_strides=(1, 1))


@lru_cache(maxsize=1)
def driver():
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise CudaUnavailableError(
            "fo_lib.gemm.sm90 builds TMA tensor maps with cuda-bindings: pip install 'fo_lib[cuda13]' "
            "(or [cuda12])") from exc
    # Idempotent; torch/CuPy have normally initialised the driver already.
    driver.cuInit(0)
    return driver


@lru_cache(maxsize=512)
def _tma_desc(ptr: int, rows: int, cols: int, row_stride: int, box_rows: int, dtype: str):
    """A 128B-swizzled, zero-filling 2-D tensor map as a size-1 ``void128`` numpy array (CuPy passes
    it to the kernel by value). Cached: a map only encodes (address, shape, stride, box, type), so a
    reused address with the same geometry gets an identical, still valid map."""
    import ctypes

    import numpy as np

    f = tma_desc_fields(rows, cols, row_stride, box_rows)
    drv = driver()
    dt = {"bf16": drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
          "f16": drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16}[dtype]
    err, tmap = drv.cuTensorMapEncodeTiled(
        dt, 2, ptr,
        [drv.cuuint64_t(v) for v in f["global_dim"]],
        [drv.cuuint64_t(v) for v in f["global_strides"]],
        [drv.cuuint32_t(v) for v in f["box_dim"]],
        [drv.cuuint32_t(v) for v in f["element_strides"]],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        # NONE = out-of-bounds elements read as zero: the M/N/K tails contribute nothing.
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise GemmError(f"cuTensorMapEncodeTiled failed ({err}) for a {rows} x {cols} {dtype} matrix, "
                        f"row stride {row_stride}, box {box_rows} x 64, address {ptr:#x}")
    raw = ctypes.string_at(tmap.getPtr(), 128)
    return np.frombuffer(raw, dtype=np.uint8).copy().view(np.dtype((np.void, 128)))


def operand_desc(t, box_rows: int, dtype: str):
    return _tma_desc(t.data_ptr(), t.size(0), t.size(1), t.stride(0), box_rows, dtype)
