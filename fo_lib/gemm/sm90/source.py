"""The Hopper GEMM's kernel sources: one instantiation of ``fo_lib/cuda/gemm_sm90.cuh``'s body per
(tile config, dtype, epilogue), each compiled by NVRTC for sm_90a (:mod:`fo_lib.jit`), and the list
of every variant the build and the compile checks cover: exactly the ones a call can launch
(:func:`variant_epilogues`). Pure Python."""
from __future__ import annotations

from dataclasses import replace

from ..._util import DTYPE_TAG
from ..config import DTYPES, EPILOGUE_POLICY, EPILOGUES, GemmError
from ..wgmma import wgmma_source
from .configs import CONFIGS, Sm90Config

ARCH = "sm_90a"  # the NVRTC architecture of every source here (wgmma, setmaxnreg)


def kernel_name(cfg: Sm90Config, dtype: str, epilogue: str) -> str:
    return f"fo_gemm_sm90_nt_{cfg.kernel_id}_{dtype}_{epilogue}"


def variant_epilogues(cfg: Sm90Config) -> tuple[str, ...]:
    """The epilogues a call can launch ``cfg``'s kernel with: every one of :data:`EPILOGUES`, and with
    a stream-K tail compiled in only the plain store (the probe, the signal and the scatter run a
    config in whole waves: the wave model's groups are whole waves; docs/decisions.md, "Only the
    plain store takes a stream-K tail")."""
    return ("plain",) if cfg.stream_k else EPILOGUES


def generate_source(cfg: Sm90Config, dtype: str, epilogue: str) -> tuple[str, str]:
    """The instantiation source of one (tile config, dtype, epilogue) and its kernel name."""
    if not isinstance(cfg, Sm90Config):
        raise GemmError(f"config must be an Sm90Config, got {type(cfg).__name__}")
    cfg.validate()
    if dtype not in DTYPES:
        raise GemmError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if epilogue not in EPILOGUES:
        raise GemmError(f"epilogue must be one of {EPILOGUES}, got {epilogue!r}")
    if epilogue not in variant_epilogues(cfg):
        raise GemmError(f"{cfg.kernel_id}: only the plain store has a stream-K tail; the {epilogue} epilogue "
                        "runs whole waves (run the config's whole_waves())")
    name = kernel_name(cfg, dtype, epilogue)
    targs = (f"{cfg.BN}, {cfg.stages}, {cfg.cluster}, {str(cfg.pingpong).lower()}, {DTYPE_TAG[dtype]}, "
             f"{EPILOGUE_POLICY[epilogue]}, {str(cfg.direct_c).lower()}, {str(cfg.stream_k).lower()}")
    # NOTES: __launch_bounds__(384, 1) gives the kernel a register cap at entry, without which
    # setmaxnreg is ignored (ptxas warning C7508). A compiled-in cluster size lets a plain
    # cuLaunchKernel (CuPy's launch) start clusters.
    cluster = f" __cluster_dims__({cfg.cluster}, 1, 1)" if cfg.cluster > 1 else ""
    source = f"""#include "gemm_sm90.cuh"

{wgmma_source(cfg.BN)}

extern "C" __global__ void __launch_bounds__({cfg.threads}, 1){cluster}
{name}(const __grid_constant__ fo::TmaDesc tma_a, const __grid_constant__ fo::TmaDesc tma_b,
       fo::bits16* C, int M, int N, int K, long long ldc, int order, int swizzle,
       fo::bits16* comm_buf, const long long* row_offset, const int* tile_group,
       unsigned int* group_counter, unsigned long long* probe, int sk_tiles, int sk_split, float* sk_partial,
       unsigned int* sk_flag, const long long* sk_bounds) {{
    fo::gemm_sm90_body<{targs}>(tma_a, tma_b, C, M, N, K, ldc, order, swizzle, comm_buf, row_offset, tile_group,
                                group_counter, probe, sk_tiles, sk_split, sk_partial, sk_flag, sk_bounds);
}}
"""
    return source, name


def compiled_variants() -> dict:
    """Every compiled specialization by label: each of :data:`CONFIGS`, and each single-CTA one again
    with its stream-K tail compiled in (``NAME+sk``, as :func:`.configs.config_label` marks it)."""
    return {**CONFIGS, **{f"{n}+sk": replace(c, stream_k=True) for n, c in CONFIGS.items() if c.cluster == 1}}


def code_path(cfg: Sm90Config) -> tuple:
    """What decides a variant's code beyond its tile width and stages: ping-pong, direct C (ping-pong
    only), the cluster and the stream-K tail."""
    return cfg.pingpong, cfg.direct_c, cfg.cluster, cfg.stream_k


def compile_check_sources():
    """Every compiled variant (:func:`compiled_variants`) x epilogue it launches with
    (:func:`variant_epilogues`) in bf16, and in f16 the first variant of each :func:`code_path` x
    those epilogues: the element type changes the MMA and the conversions, not the tile's code
    (fo_lib.kernel_catalog: compiled for sm_90a only, where wgmma and setmaxnreg exist)."""
    seen = set()
    for cname, cfg in compiled_variants().items():
        first_of_path = code_path(cfg) not in seen
        seen.add(code_path(cfg))
        for dtype in DTYPES:
            if dtype != "bf16" and not first_of_path:
                continue
            for epi in variant_epilogues(cfg):
                yield f"gemm_sm90 {cname} {dtype} {epi}", generate_source(cfg, dtype, epi)[0]
