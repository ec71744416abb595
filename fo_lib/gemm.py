"""The portable tensor-core GEMM ``C = A @ B^T`` and its FlashOverlap epilogues (host side).

Device code: ``fo_lib/cuda/gemm_mma.cuh`` (mma.sync + ldmatrix + cp.async, sm_80 .. sm_90) and
``fo_lib/cuda/tile_schedule.cuh`` (the raster order of :func:`fo_lib.tiling.raster_tile`). This module
picks a tile config, generates the tiny instantiation source, and launches on a torch stream.

* ``A`` is ``M x K`` row-major, ``B`` is the ``nn.Linear`` weight ``N x K`` row-major ("NT"); bf16 or
  fp16, fp32 accumulation, output in the input type. ``K`` must be a multiple of 8 (16-byte rows for
  ``cp.async``); ``M`` and ``N`` are free (tails are predicated).
* The kernel is persistent: ``ctas`` CTAs (default: one per SM) walk the schedule ``s = b, b + P, ...``
  so tile ``s`` runs in wave ``s // P``, exactly what :class:`fo_lib.tiling.TileGrid` predicts for the
  same ``(BM, BN, order, swizzle, ctas)``.
* Epilogues: ``plain`` stores ``C``; ``signal`` stores row ``i`` of tile column ``tn`` at
  ``comm_buf[row_offset[i, tn] + c]`` and then adds 1 to ``group_counter[tile_group[tile_id]]``
  (release, never reset: the waiter compares against epoch targets); ``signal_rows`` stores ``C``
  row-major into ``comm_buf`` and signals the same way; ``signal_tiles`` stores each tile at its
  place (``tile_place``: a base per tile, the tile and subtile layouts without a row table) and
  signals the same way (one kernel, ``signal_store``, runs both: which layout is a launch argument);
  ``probe`` stores ``C`` and records per tile
  ``(start ns, end ns, smid, cta)``; ``scatter`` is ``signal`` without the counter. The signal
  epilogues release a tile's counter one k-tile into the CTA's next tile (its stores have drained
  by then), from the load cursor's once-per-tile branch: the k-loop's code is the plain kernel's.

``import fo_lib.gemm`` needs neither torch nor CuPy; they are imported when a kernel is launched.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from . import kernels
from .tiling import RASTER_ORDERS

DTYPES = ("bf16", "f16")
# The store modes of both kernel families (the calls below choose one).
EPILOGUES = ("plain", "signal", "probe", "scatter", "signal_rows", "signal_tiles")
_EPILOGUE_ID = {name: i for i, name in enumerate(EPILOGUES)}  # the Hopper kernel's EPILOGUE argument
# The portable kernel's instantiations (its EPILOGUE argument): one kernel, "signal_store", stores
# row-major or at tile places, chosen per launch. Compiled as two, their main loops were scheduled
# unlike plain's and cost ~1 % more (docs/perf-log.md, session 9).
PORTABLE_KERNELS = ("plain", "signal", "probe", "scatter", "signal_store")
_PORTABLE_KERNEL_OF = {"signal_rows": "signal_store", "signal_tiles": "signal_store"}


def portable_kernel(epilogue: str) -> str:
    """The portable instantiation that runs a store mode (:data:`EPILOGUES`)."""
    return _PORTABLE_KERNEL_OF.get(epilogue, epilogue)


_DTYPE_TAG = {"bf16": "fo::bf16_tag", "f16": "fo::f16_tag"}
_MAX_SMEM = 227 * 1024  # H100/H200 opt-in limit per block; the device's own limit is checked at launch


class GemmError(ValueError):
    """A GEMM call or config that cannot run (bad dtype, shape, stride, table, ...)."""


class RasterMixin:
    """What every tile config (portable or Hopper) shares: ``BM``, ``BN``, ``order``, ``swizzle``."""

    def grid(self, M: int, N: int, ctas: int):
        """The :class:`~fo_lib.tiling.TileGrid` (tiles, raster, waves) of ``M x N`` on ``ctas`` CTAs."""
        from .tiling import TileGrid
        return TileGrid(M, N, self.BM, self.BN, order=self.order, swizzle=self.swizzle, _ctas=ctas)

    def with_raster(self, order: str | None = None, swizzle: int | None = None):
        """The same tiles walked in another raster order (a run-time argument: no recompile)."""
        from dataclasses import replace
        return replace(self, order=self.order if order is None else order,
                       swizzle=self.swizzle if swizzle is None else swizzle)


@dataclass(frozen=True)
class GemmConfig(RasterMixin):
    """One tile configuration. ``order``/``swizzle`` are run-time arguments (no recompile)."""

    BM: int = 128
    BN: int = 256
    BK: int = 32
    warps_m: int = 2
    warps_n: int = 4
    stages: int = 4
    order: str = "row"
    swizzle: int = 1

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def smem_bytes(self) -> int:
        """Operand ring (``stages`` x (BM + BN) x BK) + the separate C staging tile (2-byte elements)
        + BM int64 row offsets (signal epilogue)."""
        return 2 * (self.stages * (self.BM + self.BN) * self.BK + self.BM * self.BN) + 8 * self.BM

    @property
    def warp_tile(self) -> tuple[int, int]:
        return self.BM // self.warps_m, self.BN // self.warps_n

    @property
    def tile_name(self) -> str:
        """Identifies the compiled specialization (everything but the run-time raster)."""
        return f"m{self.BM}n{self.BN}k{self.BK}_w{self.warps_m}x{self.warps_n}_s{self.stages}"

    def validate(self) -> "GemmConfig":
        def bad(msg: str):
            raise GemmError(f"GemmConfig {self.tile_name}: {msg}")

        for name in ("BM", "BN", "BK", "warps_m", "warps_n", "stages", "swizzle"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                bad(f"{name} must be a positive int, got {v!r}")
        if self.BK not in (32, 64):
            bad(f"BK must be 32 or 64, got {self.BK}")
        if self.BN % 64:
            bad(f"BN must be a multiple of 64 (C staging swizzle), got {self.BN}")
        if self.BM % 16:
            bad(f"BM must be a multiple of 16, got {self.BM}")
        if self.BM % self.warps_m or self.BN % self.warps_n:
            bad(f"tile {self.BM}x{self.BN} does not split over {self.warps_m}x{self.warps_n} warps")
        wm, wn = self.warp_tile
        if wm % 16 or wn % 16:
            bad(f"warp tile {wm}x{wn} must be a multiple of 16x16")
        if self.threads > 1024:
            bad(f"{self.threads} threads per CTA exceeds 1024")
        cpr = self.BK // 8
        if (self.BM * cpr) % self.threads or (self.BN * cpr) % self.threads or (self.threads // cpr) % 8:
            bad(f"{self.threads} threads cannot split the {self.BM}/{self.BN} x {self.BK} operand loads evenly")
        if (self.BM * self.BN // 8) % self.threads:
            bad(f"{self.threads} threads cannot split the C tile stores evenly")
        if self.BM > self.threads:
            bad(f"BM={self.BM} exceeds {self.threads} threads (one thread per row fetches row offsets)")
        if not 2 <= self.stages <= 8:
            bad(f"stages must be in [2, 8], got {self.stages}")
        if self.smem_bytes > _MAX_SMEM:
            bad(f"needs {self.smem_bytes} B of shared memory, more than {_MAX_SMEM}")
        if self.order not in RASTER_ORDERS:
            bad(f"order must be one of {RASTER_ORDERS}, got {self.order!r}")
        # Accumulators (fp32) + double-buffered fragments must fit the 255-register budget.
        if (wm * wn) // 32 + 2 * (wm // 16 * 4 + wn // 8 * 2) > 200:
            bad(f"warp tile {wm}x{wn} needs too many registers")
        return self


CONFIGS: dict[str, GemmConfig] = {
    "128x256x32": GemmConfig(128, 256, 32, 2, 4, 4),
    "256x128x32": GemmConfig(256, 128, 32, 4, 2, 4),
    "128x256x64": GemmConfig(128, 256, 64, 2, 4, 3),
    "256x128x64": GemmConfig(256, 128, 64, 4, 2, 3),
    "128x128x32": GemmConfig(128, 128, 32, 2, 4, 4),
    "64x64x32": GemmConfig(64, 64, 32, 2, 2, 3),
}
for _c in CONFIGS.values():
    _c.validate()

# Relative throughput of a full tile per unit area (mainloop efficiency), used only to trade tile
# size against last-wave fill in default_config. Bigger warp tiles reuse fragments better.
# Relative full-tile throughput, measured on an H200 (bf16, K >= 4096, interleaved medians from
# scripts/bench_gemm.py, before session 7's producer change, which took 256x128x64 from ~375 to
# ~430): 256x128x64 ~375, 128x256x64 ~365, x32 variants ~345, 128x128x32 ~280, 64x64x32 ~95
# TFLOP/s. Only used to trade tile size against wave count in default_config.
_TILE_SPEED = {"256x128x64": 1.0, "128x256x64": 0.97, "256x128x32": 0.93, "128x256x32": 0.93,
               "128x128x32": 0.75, "64x64x32": 0.25}
# Preference order (ties go to the earlier); the x32 variants are the fallbacks for GPUs with less
# shared memory (A100: 164 KB, sm_86/89: 99 KB per block).
_DEFAULT_CANDIDATES = ("256x128x64", "128x256x64", "256x128x32", "128x256x32", "128x128x32", "64x64x32")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@lru_cache(maxsize=1024)
def default_config(M: int, N: int, K: int, sm_count: int = 132, smem_limit: int = _MAX_SMEM) -> GemmConfig:
    """Pick a config by a wave-count model (pure; DeepGEMM-style).

    Estimated time = waves x padded tile area / tile speed, over the configs that fit ``smem_limit``:
    the big tiles win unless their last wave is badly underfilled or they leave SMs idle (small M,
    N), where a smaller tile spreads better; a smaller tile must win by 3 %. Raster: row order, bands
    of up to 8 tile rows (L2 reuse of A and B inside a wave); swizzle 1 when everything fits in one
    wave.
    """
    return pick_by_waves({n: CONFIGS[n] for n in _DEFAULT_CANDIDATES}, _TILE_SPEED, M, N, K, sm_count, smem_limit)


def pick_by_waves(candidates: dict, tile_speed: dict, M: int, N: int, K: int, sm_count: int, smem_limit: int,
                  family: str = ""):
    """The wave-count model shared by both GEMM families: among ``candidates`` (name -> config) that
    fit ``smem_limit``, the lowest waves x padded tile area / ``tile_speed[name]``; a later candidate
    must win by 3 %. Returns it with a row raster in bands of up to 8 tile rows."""
    for name, v in (("M", M), ("N", N), ("K", K), ("sm_count", sm_count), ("smem_limit", smem_limit)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise GemmError(f"{name} must be a positive int, got {v!r}")
    best, best_cost = None, math.inf
    for name, cfg in candidates.items():
        if cfg.smem_bytes > smem_limit:
            continue
        tiles = _ceil_div(M, cfg.BM) * _ceil_div(N, cfg.BN)
        # Tile work is spent on the padding past M/N (tails) too, so use the padded area.
        cost = _ceil_div(tiles, sm_count) * cfg.BM * cfg.BN / tile_speed[name]
        if cost < best_cost * 0.97:
            best, best_cost = cfg, cost
    if best is None:
        raise GemmError(f"no {family + ' ' if family else ''}GEMM config fits {smem_limit} B of shared memory per block")
    tiles_m = _ceil_div(M, best.BM)
    tiles = tiles_m * _ceil_div(N, best.BN)
    swizzle = 1 if tiles <= sm_count else min(8, tiles_m)
    return best.with_raster("row", swizzle)


# --- source generation --------------------------------------------------------------------------
def kernel_name(cfg: GemmConfig, dtype: str, epilogue: str) -> str:
    return f"fo_gemm_nt_{cfg.tile_name}_{dtype}_{epilogue}"


def generate_source(cfg: GemmConfig, dtype: str, epilogue: str) -> tuple[str, str]:
    """The instantiation source of one (tile config, dtype, epilogue) and its kernel name."""
    cfg.validate()
    if dtype not in DTYPES:
        raise GemmError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    kernel = portable_kernel(epilogue)
    if kernel not in PORTABLE_KERNELS:
        raise GemmError(f"epilogue must be one of {EPILOGUES}, got {epilogue!r}")
    name = kernel_name(cfg, dtype, kernel)
    targs = (f"{cfg.BM}, {cfg.BN}, {cfg.BK}, {cfg.warps_m}, {cfg.warps_n}, {cfg.stages}, "
             f"{_DTYPE_TAG[dtype]}, {PORTABLE_KERNELS.index(kernel)}")
    source = f"""#include "gemm_mma.cuh"

extern "C" __global__ void __launch_bounds__({cfg.threads}, 1)
{name}(const fo::bits16* A, const fo::bits16* B, fo::bits16* C, int M, int N, int K,
       long long lda, long long ldb, long long ldc, int order, int swizzle,
       fo::bits16* comm_buf, const long long* row_offset, const int* tile_group,
       unsigned int* group_counter, unsigned long long* probe) {{
    fo::gemm_nt_body<{targs}>(A, B, C, M, N, K, lda, ldb, ldc, order, swizzle,
                              comm_buf, row_offset, tile_group, group_counter, probe);
}}
"""
    return source, name


def raster_check_source() -> tuple[str, str]:
    """A tiny kernel writing ``fo::raster_tile(s)`` for ``s < tiles`` (``out[2s] = tm, out[2s+1] = tn``):
    the GPU test compares it with :func:`fo_lib.tiling.raster_tile`."""
    name = "fo_raster_tile_check"
    source = f"""#include "tile_schedule.cuh"

extern "C" __global__ void {name}(int* out, int tiles_m, int tiles_n, int order, int swizzle) {{
    const int tiles = tiles_m * tiles_n;
    for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < tiles; s += gridDim.x * blockDim.x) {{
        int tm, tn;
        fo::raster_tile(s, tiles_m, tiles_n, order, swizzle, tm, tn);
        out[2 * s] = tm;
        out[2 * s + 1] = tn;
    }}
}}
"""
    return source, name


@kernels.register_compile_check
def compile_check_sources():
    """Every config x dtype x instantiation (CI compiles each for every arch in kernels.ARCHS)."""
    for cname, cfg in CONFIGS.items():
        for dtype in DTYPES:
            for epi in PORTABLE_KERNELS:
                src, name = generate_source(cfg, dtype, epi)
                yield f"gemm {cname} {dtype} {epi}", src
    yield "raster_tile check", raster_check_source()[0]


# --- launch -------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _device_info(device_index: int) -> tuple[int, int]:
    """(SM count, opt-in shared memory per block) of a device."""
    import cupy
    with cupy.cuda.Device(device_index):
        sms = cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMultiProcessorCount,
                                                   device_index)
        smem = cupy.cuda.runtime.deviceGetAttribute(
            cupy.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, device_index)
    return int(sms), int(smem)


def sm_count(device=None) -> int:
    import torch
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    return _device_info(dev.index if dev.index is not None else torch.cuda.current_device())[0]


def _dtype_name(t) -> str:
    import torch
    if t.dtype == torch.bfloat16:
        return "bf16"
    if t.dtype == torch.float16:
        return "f16"
    raise GemmError(f"only bfloat16 and float16 are supported, got {t.dtype}")


def _check_matrix(t, name: str, rows: int | None = None) -> None:
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


def _check_operands(a, b, config: GemmConfig | None, ctas: int | None, pick_default=None):
    """Validate ``a``, ``b``, ``config`` and ``ctas``; returns ``(dtype, M, N, K, config, ctas)``.
    ``pick_default(M, N, K, sm_count, smem_limit)`` chooses the config when ``config`` is None
    (default: :func:`default_config`; fo_lib.gemm_sm90 passes its own)."""
    _check_matrix(a, "a")
    _check_matrix(b, "b")
    dtype = _dtype_name(a)
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
    sms, smem_limit = _device_info(dev_index)
    cfg = (pick_default or default_config)(M, N, K, sms, smem_limit) if config is None else config
    cfg.validate()
    if cfg.smem_bytes > smem_limit:
        raise GemmError(f"config {cfg.tile_name} needs {cfg.smem_bytes} B of shared memory; "
                        f"{a.device} allows {smem_limit} B per block")
    if ctas is None:
        ctas = sms
    if not isinstance(ctas, int) or isinstance(ctas, bool) or ctas <= 0:
        raise GemmError(f"ctas must be a positive int, got {ctas!r}")
    return dtype, M, N, K, cfg, ctas


def _check_out(out, M: int, N: int, a, name: str = "out"):
    _check_matrix(out, name, rows=M)
    if out.size(1) != N:
        raise GemmError(f"{name} must be {M} x {N}, got {tuple(out.shape)}")
    if out.dtype != a.dtype or out.device != a.device:
        raise GemmError(f"{name} must be {a.dtype} on {a.device}, got {out.dtype} on {out.device}")


def _check_table_store(a, comm_buf, row_offset, tile_group, group_counter, cfg, M, N, tile_place=None):
    """Validate the communication buffer and tables of the table-store epilogues."""
    import torch
    tiles_m, tiles_n = _ceil_div(M, cfg.BM), _ceil_div(N, cfg.BN)
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


class GemmFamily:
    """The public calls of one GEMM kernel family, written once for the portable and the Hopper
    kernels. A family supplies its operand check (``check(a, b, config, ctas)`` -> ``(dtype, M, N, K,
    cfg, ctas)``), its source generator, and the leading kernel arguments that differ between
    families (``operand_args(cfg, dtype, a, b, c_ptr, ldc)``: pointers and strides, or TMA maps); the
    rest of the argument list, the kernel cache and the launch are shared.

    Launches are memoized (:class:`fo_lib.kernels.LaunchMemo`, keyed by the tensors' signatures,
    the config and ``ctas``): a repeated call (a hot loop, an engine plan's GEMM) skips the checks and
    the argument packing."""

    def __init__(self, check, generate, operand_args, *, place_store: bool = True, kernel_of=None):
        self.check, self.generate, self.operand_args = check, generate, operand_args
        # The instantiation that runs a store mode (the portable kernel shares one between two).
        self.kernel_of = kernel_of or (lambda epilogue: epilogue)
        # Whether the engine should store tile blocks through tile places (``signal_tiles``) rather
        # than the row table: whichever measured cheaper for the family (docs/perf-log.md, session 6).
        self.place_store = place_store
        self._kernels: dict[tuple[str, str, str, int], object] = {}
        self._memo = kernels.LaunchMemo()

    def kernel(self, cfg, dtype: str, epilogue: str, device_index: int):
        """The compiled kernel of ``(cfg, dtype, epilogue)`` on a device (compiled once)."""
        import cupy

        key = (cfg.tile_name, dtype, self.kernel_of(epilogue), device_index)
        kernel = self._kernels.get(key)
        if kernel is None:
            with cupy.cuda.Device(device_index):
                src, name = self.generate(cfg, dtype, epilogue)
                kernel = kernels.get_kernel(src, name)
                if cfg.smem_bytes > 48 * 1024:
                    kernel.max_dynamic_shared_size_bytes = cfg.smem_bytes
            self._kernels[key] = kernel
        return kernel

    def prepare(self, cfg, dtype: str, epilogue: str, a, b, c_ptr: int, ldc: int, ctas: int,
                comm_ptr: int = 0, row_offset_ptr: int = 0, tile_group_ptr: int = 0, counter_ptr: int = 0,
                probe_ptr: int = 0):
        """The launch of checked operands, packed (:class:`fo_lib.kernels.PreparedLaunch`)."""
        import numpy as np

        M, N = a.shape[0], b.shape[0]
        dev = a.device.index
        # NOTES: CTAs past the last tile would only exit; launching min(ctas, tiles) keeps the
        # schedule (tile s -> CTA s % ctas) unchanged.
        grid = min(ctas, _ceil_div(M, cfg.BM) * _ceil_div(N, cfg.BN))
        u64, i32 = np.uint64, np.int32
        args = (*self.operand_args(cfg, dtype, a, b, c_ptr, ldc), i32(RASTER_ORDERS.index(cfg.order)),
                i32(cfg.swizzle), u64(comm_ptr), u64(row_offset_ptr), u64(tile_group_ptr), u64(counter_ptr),
                u64(probe_ptr))
        return kernels.PreparedLaunch(self.kernel(cfg, dtype, epilogue, dev), (grid,), (cfg.threads,), args,
                                      device_index=dev, shared_mem=cfg.smem_bytes)

    def gemm_nt(self, a, b, out=None, *, config=None, ctas: int | None = None, stream=None):
        """``out = a @ b.T`` (``a``: M x K, ``b``: N x K); returns ``out``."""
        if out is None and _is_matrix(a) and _is_matrix(b):
            import torch
            out = torch.empty(a.shape[0], b.shape[0], dtype=a.dtype, device=a.device)

        def build():
            dtype, M, N, K, cfg, n = self.check(a, b, config, ctas)
            o = _output(out, M, N, a)
            return self.prepare(cfg, dtype, "plain", a, b, o.data_ptr(), o.stride(0), n)

        self._memo.get_or_build(kernels.memo_key(("plain", config, ctas), a, b, out), build)(stream)
        return out

    def gemm_nt_signal(self, a, b, comm_buf, row_offset, tile_group, group_counter, *, config,
                       ctas: int | None = None, stream=None, tile_place=None) -> None:
        """``a @ b.T`` stored through the row table into ``comm_buf``, signalling a counter per tile
        group.

        Element ``C[i, tn * BN + c]`` (``c < min(BN, N - tn * BN)``) goes to
        ``comm_buf.flatten()[row_offset[i, tn] + c]``; after a tile is stored,
        ``group_counter[tile_group[tile_id]] += 1`` (release, gpu scope). Counters are never reset.
        ``row_offset=None`` stores ``C`` row-major into ``comm_buf`` (the "rows" layout of
        :func:`fo_lib.reorder.row_reorder`: no table is read), or, with ``tile_place`` (int64
        ``[tiles, 4]``, :attr:`fo_lib.reorder.TileReorder.tile_place`), each tile at its place: row
        ``r`` of tile ``t`` at ``base + (r >> shift) * sub_stride + (r & (2^shift - 1)) * cols`` for
        ``tile_place[t] = (base, sub_stride, shift, 0)`` (``0 <= shift <= 30``), the tile and subtile
        layouts without a row table. Like ``row_offset``, its contents are trusted (dtype, shape and
        alignment are checked, not the addresses it makes): build it with :mod:`fo_lib.reorder`.
        ``config`` is required: the tables depend on its tile shape.
        """
        if config is None:
            raise GemmError("gemm_nt_signal needs an explicit config (the tables are built for its tiles)")
        if tile_place is not None and row_offset is not None:
            raise GemmError("pass a row table (row_offset) or tile places (tile_place), not both")

        def build():
            dtype, M, N, K, cfg, n = self.check(a, b, config, ctas)
            _check_table_store(a, comm_buf, row_offset, tile_group, group_counter, cfg, M, N, tile_place)
            if tile_place is not None:
                return self.prepare(cfg, dtype, "signal_tiles", a, b, 0, 0, n, comm_ptr=comm_buf.data_ptr(),
                                    row_offset_ptr=tile_place.data_ptr(), tile_group_ptr=tile_group.data_ptr(),
                                    counter_ptr=group_counter.data_ptr())
            if row_offset is None:
                return self.prepare(cfg, dtype, "signal_rows", a, b, comm_buf.data_ptr(), N, n,
                                    tile_group_ptr=tile_group.data_ptr(), counter_ptr=group_counter.data_ptr())
            return self.prepare(cfg, dtype, "signal", a, b, 0, 0, n, comm_ptr=comm_buf.data_ptr(),
                                row_offset_ptr=row_offset.data_ptr(), tile_group_ptr=tile_group.data_ptr(),
                                counter_ptr=group_counter.data_ptr())

        key = kernels.memo_key(("signal", config, ctas), a, b, comm_buf, row_offset, tile_group, group_counter,
                               tile_place)
        self._memo.get_or_build(key, build)(stream)

    def gemm_nt_scatter(self, a, b, comm_buf, row_offset, *, config, ctas: int | None = None,
                        stream=None) -> None:
        """``a @ b.T`` stored through the row table into ``comm_buf`` with no signal: the
        pre-communication reorder alone (non-overlapped runs; the signal-cost ablation)."""
        if config is None:
            raise GemmError("gemm_nt_scatter needs an explicit config (the table is built for its tiles)")
        if row_offset is None:
            raise GemmError("gemm_nt_scatter stores through a row table: row_offset is required")

        def build():
            dtype, M, N, K, cfg, n = self.check(a, b, config, ctas)
            _check_table_store(a, comm_buf, row_offset, None, None, cfg, M, N)
            return self.prepare(cfg, dtype, "scatter", a, b, 0, 0, n, comm_ptr=comm_buf.data_ptr(),
                                row_offset_ptr=row_offset.data_ptr())

        self._memo.get_or_build(kernels.memo_key(("scatter", config, ctas), a, b, comm_buf, row_offset), build)(stream)

    def gemm_nt_probe(self, a, b, out=None, *, config, ctas: int | None = None, stream=None):
        """``a @ b.T`` plus a per-tile probe: returns ``(out, probe)``, ``probe`` int64 ``[tiles, 4]``
        = (start globaltimer ns, end ns, smid, CTA index), indexed by row-major tile id."""
        import torch
        if config is None:
            raise GemmError("gemm_nt_probe needs an explicit config")
        dtype, M, N, K, cfg, ctas = self.check(a, b, config, ctas)
        out = _output(out, M, N, a)
        probe = torch.zeros(_ceil_div(M, cfg.BM) * _ceil_div(N, cfg.BN), 4, dtype=torch.int64, device=a.device)
        self.prepare(cfg, dtype, "probe", a, b, out.data_ptr(), out.stride(0), ctas,
                     probe_ptr=probe.data_ptr())(stream)
        return out, probe


def _is_matrix(t) -> bool:
    import torch
    return isinstance(t, torch.Tensor) and t.dim() == 2


def _output(out, M, N, a):
    """``out`` checked, or a new ``M x N`` tensor like ``a``."""
    if out is None:
        import torch
        return torch.empty(M, N, dtype=a.dtype, device=a.device)
    _check_out(out, M, N, a)
    return out


def _portable_operand_args(cfg, dtype, a, b, c_ptr, ldc):
    import numpy as np
    M, K = a.shape
    return (np.uint64(a.data_ptr()), np.uint64(b.data_ptr()), np.uint64(c_ptr), np.int32(M), np.int32(b.shape[0]),
            np.int32(K), np.int64(a.stride(0)), np.int64(b.stride(0)), np.int64(ldc))


PORTABLE = GemmFamily(_check_operands, generate_source, _portable_operand_args, kernel_of=portable_kernel)
gemm_nt = PORTABLE.gemm_nt
gemm_nt_signal = PORTABLE.gemm_nt_signal
gemm_nt_scatter = PORTABLE.gemm_nt_scatter
gemm_nt_probe = PORTABLE.gemm_nt_probe


# --- which kernel runs a config --------------------------------------------------------------------
def kernels_for(config) -> GemmFamily:
    """The family whose ``gemm_nt`` / ``gemm_nt_signal`` / ``gemm_nt_scatter`` / ``gemm_nt_probe`` run
    ``config``: the Hopper kernels for a :class:`~fo_lib.gemm_sm90.Sm90Config`, else the portable ones."""
    from . import gemm_sm90
    return gemm_sm90.SM90 if isinstance(config, gemm_sm90.Sm90Config) else PORTABLE


def auto_config(M: int, N: int, K: int, sm_count: int = 132, device=None):
    """The default config for a GPU: the Hopper wgmma/TMA kernel on compute capability 9.0 devices,
    the portable mma.sync kernel elsewhere. ``FO_GEMM=portable`` forces the portable one."""
    import os

    from . import gemm_sm90
    if os.environ.get("FO_GEMM", "auto") != "portable" and gemm_sm90.is_supported(device):
        return gemm_sm90.default_config(M, N, K, sm_count)
    return default_config(M, N, K, sm_count)
