"""The portable tensor-core GEMM ``C = A @ B^T`` and its FlashOverlap epilogues (host side).

Device code: ``fo_lib/cuda/gemm_mma.cuh`` (mma.sync + ldmatrix + cp.async, sm_80 .. sm_90), which
composes its roles (``mma_producer.cuh``, ``mma_mainloop.cuh``, ``mma_epilogue.cuh`` with the
epilogue policies of both families, ``epilogue.cuh``), and ``fo_lib/cuda/tile_schedule.cuh`` (the
raster order of :func:`fo_lib.tiling.raster_tile`). This module
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

``import fo_lib.gemm.portable`` needs neither torch nor CuPy; they are imported when a kernel is launched.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .._util import DTYPE_TAG
from .checks import check_operands
from .config import DTYPES, EPILOGUE_POLICY, EPILOGUES, MAX_SMEM, GemmError, RasterMixin, pick_by_waves
from .family import GemmFamily

# The portable kernel's instantiations (its epilogue policy, fo_lib.gemm.config.EPILOGUE_POLICY): one
# kernel, "signal_store", stores row-major or at tile places, chosen per launch. Compiled as two,
# their main loops were scheduled unlike plain's and ran slower (docs/decisions.md,
# "The signal's two plain-layout stores are one kernel; plain keeps its own").
PORTABLE_KERNELS = ("plain", "signal", "probe", "scatter", "signal_store")
_PORTABLE_KERNEL_OF = {"signal_rows": "signal_store", "signal_tiles": "signal_store"}


def portable_kernel(epilogue: str) -> str:
    """The portable instantiation that runs a store mode (:data:`EPILOGUES`)."""
    return _PORTABLE_KERNEL_OF.get(epilogue, epilogue)


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

        self._check_fields(("BM", "BN", "BK", "warps_m", "warps_n", "stages", "swizzle"), bad)
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
        if self.smem_bytes > MAX_SMEM:
            bad(f"needs {self.smem_bytes} B of shared memory, more than {MAX_SMEM}")
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

# Relative full-tile throughput per unit area (mainloop efficiency; bigger warp tiles reuse
# fragments better), measured on an H200 (docs/decisions.md,
# "The portable picker's tile speeds are measured full-tile throughputs").
# Only used to trade tile size against wave count in default_config.
_TILE_SPEED = {"256x128x64": 1.0, "128x256x64": 0.97, "256x128x32": 0.93, "128x256x32": 0.93,
               "128x128x32": 0.75, "64x64x32": 0.25}
# Preference order (ties go to the earlier); the x32 variants are the fallbacks for GPUs with less
# shared memory (A100: 164 KB, sm_86/89: 99 KB per block).
_DEFAULT_CANDIDATES = ("256x128x64", "128x256x64", "256x128x32", "128x256x32", "128x128x32", "64x64x32")


@lru_cache(maxsize=1024)
def default_config(M: int, N: int, K: int, sm_count: int = 132, smem_limit: int = MAX_SMEM) -> GemmConfig:
    """Pick a config by a wave-count model (pure; DeepGEMM-style).

    Estimated time = waves x padded tile area / tile speed, over the configs that fit ``smem_limit``:
    the big tiles win unless their last wave is badly underfilled or they leave SMs idle (small M,
    N), where a smaller tile spreads better; a smaller tile must win by 3 %. Raster: row order, bands
    of up to 8 tile rows (L2 reuse of A and B inside a wave); swizzle 1 when everything fits in one
    wave.
    """
    return pick_by_waves({n: CONFIGS[n] for n in _DEFAULT_CANDIDATES}, _TILE_SPEED, M, N, K, sm_count, smem_limit)


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
             f"{DTYPE_TAG[dtype]}, {EPILOGUE_POLICY[kernel]}")
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


def compile_check_sources():
    """Every config x instantiation in bf16, and each instantiation in f16 on the first config: the
    element type changes the MMA and the epilogue's conversions, not the tile's code, so one f16
    config per instantiation covers its code paths (fo_lib.kernel_catalog: compiled for every target)."""
    first = next(iter(CONFIGS))
    for cname, cfg in CONFIGS.items():
        for dtype in DTYPES:
            if dtype != "bf16" and cname != first:
                continue
            for epi in PORTABLE_KERNELS:
                yield f"gemm {cname} {dtype} {epi}", generate_source(cfg, dtype, epi)[0]
    yield "raster_tile check", raster_check_source()[0]


def _check_operands(a, b, config, ctas):
    return check_operands(a, b, config, ctas, pick_default=default_config)


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
