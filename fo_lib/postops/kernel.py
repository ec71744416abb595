"""The post-reorder kernel's host side that needs no GPU: the NVRTC source of one specialization
(``fo_lib/cuda/post_reorder.cuh``), the specializations the compile check builds, and the launch
geometry. Pure: tested on the CPU."""
from __future__ import annotations

from dataclasses import dataclass

from .._util import DTYPE_TAG, ceil_div
from ..jit import nvrtc_version
from .spec import (ACT_CODE, ACTIVATIONS, CHUNK, DTYPES, MAX_NORM_N, MAX_THREADS_PER_ROW, NORM_ITEMS, PostOps,
                   check_dtype_name, check_sources)

_NONNORM_MAX_THREADS_PER_ROW = 512


def kernel_items(ops: PostOps) -> int:
    """Chunks per thread and loop step. RMSNorm keeps the row in registers (NORM_ITEMS); the
    streaming variants use 2 when a second input stream (bias/residual) would make 4 spill."""
    if ops.rmsnorm:
        return NORM_ITEMS
    return 2 if (ops.bias or ops.residual) else 4


def _nvrtc_has_maxnreg() -> bool:
    """``__maxnreg__`` exists from NVRTC 12.4 on (older ones get the 64-register launch bound)."""
    try:
        return nvrtc_version() >= (12, 4)
    except Exception:  # noqa: BLE001 - no CuPy here: the source is only shown, not compiled
        return True


def generate_source(ops: PostOps, dtype: str, vectorized: bool, sources: int = 1) -> tuple[str, str]:
    """The NVRTC source of one post-reorder specialization and its ``extern "C"`` kernel name
    (``sources``: copies summed per element, see :mod:`fo_lib.postops`)."""
    if not isinstance(ops, PostOps):
        raise TypeError(f"ops must be a PostOps, got {type(ops).__name__}")
    check_dtype_name(dtype)
    sources = check_sources(sources)
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
  fo::post_reorder<{DTYPE_TAG[dtype]}, {ACT_CODE[ops.activation]}, {b(ops.bias)}, {b(ops.residual)},
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


def compile_check_sources():
    """Representative specializations (fo_lib.kernel_catalog: compiled for every target)."""
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
    chunks = ceil_div(N, CHUNK)
    cap = MAX_THREADS_PER_ROW if ops.rmsnorm else _NONNORM_MAX_THREADS_PER_ROW
    if threads_per_row is None:
        g = min(cap, 32 * ceil_div(ceil_div(chunks, items), 32))
    else:
        g = int(threads_per_row)
        if g <= 0 or g % 32 or g > cap:
            raise ValueError(f"threads_per_row must be a multiple of 32 in [32, {cap}], got {threads_per_row}")
    if ops.rmsnorm and g * items * CHUNK < N:
        raise ValueError(f"RMSNorm keeps a row in registers: N={N} needs threads_per_row >= "
                         f"{ceil_div(chunks, items)} (at most N={MAX_NORM_N} is supported)")
    if threads_per_row is None and ops.rmsnorm:
        # Few rows: spread each row over more threads (fewer chunks each) to put more CTAs in flight.
        while 2 * g <= min(cap, 32 * ceil_div(chunks, 32)) and ceil_div(R, max(1, 256 // g)) < 2 * sm_count:
            g *= 2
    rows = max(1, 256 // g)
    grid_x = ceil_div(R, rows)
    grid_y = 1
    if not ops.rmsnorm:
        steps = ceil_div(chunks, g * items)  # loop iterations of one row
        if steps > 1 and grid_x < 2 * sm_count:
            grid_y = min(steps, max(1, (2 * sm_count) // grid_x), 65535)
    return LaunchConfig(g, rows, grid_x, grid_y, items)
