"""The signaled GEMM ``C = A @ B^T`` in two kernel families, and the choice between them.

Layers, each importing only those above it in this list:

* :mod:`~fo_lib.gemm.config`: dtypes, store modes (epilogues), :class:`GemmError`, the raster
  shared by every tile config, and the wave-count heuristic :func:`pick_by_waves`;
* :mod:`~fo_lib.gemm.stream_k`: the stream-K planning of a launch's last waves (which tiles every
  CTA shares, and how);
* :mod:`~fo_lib.gemm.config_tuning`: a config chosen by timing a shape's candidates on its first
  call, remembered on disk (the timing and the cache; what the Hopper family times:
  :mod:`fo_lib.gemm.sm90.config_tuning`);
* :mod:`~fo_lib.gemm.tile_table`: the Hopper tiles' measured full-wave times
  (``data/<gpu>/gemm_sm90_tiles.csv``) and the wave-quantization model that picks a tile and raster
  from them (no table: the guess of :func:`pick_by_waves`);
* :mod:`~fo_lib.gemm.checks` and :mod:`~fo_lib.gemm.family`: the operand checks and the public
  calls (``gemm_nt``, ``gemm_nt_signal``, ``gemm_nt_scatter``, ``gemm_nt_probe``) written once;
* :mod:`~fo_lib.gemm.portable` (mma.sync, sm_80 .. sm_90) and :mod:`~fo_lib.gemm.sm90` (TMA +
  wgmma, sm_90a): a tile config, a source generator and a :class:`GemmFamily` each;
* this module: :func:`kernels_for` and :func:`auto_config`, which pick the family for a config or a
  GPU.

The portable family's names are this package's own (``fo_lib.gemm.gemm_nt``, ``CONFIGS``,
``default_config``, ...), as they were before the families became modules. ``import fo_lib.gemm``
needs neither torch nor CuPy; they are imported when a kernel is launched.
"""
from __future__ import annotations

from .._util import sm_count
from . import sm90
from .config import DTYPES, EPILOGUES, GemmError, RasterMixin, pick_by_waves
from .family import GemmFamily
from .portable import (CONFIGS, PORTABLE, PORTABLE_KERNELS, GemmConfig, compile_check_sources, default_config,
                       gemm_nt, gemm_nt_probe, gemm_nt_scatter, gemm_nt_signal, generate_source, kernel_name,
                       portable_kernel, raster_check_source)

__all__ = ["CONFIGS", "DTYPES", "EPILOGUES", "PORTABLE", "PORTABLE_KERNELS", "GemmConfig", "GemmError",
           "GemmFamily", "RasterMixin", "auto_config", "compile_check_sources", "default_config", "gemm_nt",
           "gemm_nt_probe", "gemm_nt_scatter", "gemm_nt_signal", "generate_source", "kernel_name",
           "kernels_for", "pick_by_waves", "portable_kernel", "raster_check_source", "sm90", "sm_count"]


def kernels_for(config) -> GemmFamily:
    """The family whose ``gemm_nt`` / ``gemm_nt_signal`` / ``gemm_nt_scatter`` / ``gemm_nt_probe`` run
    ``config``: the Hopper kernels for a :class:`~fo_lib.gemm.sm90.Sm90Config`, else the portable ones."""
    return sm90.SM90 if isinstance(config, sm90.Sm90Config) else PORTABLE


def auto_config(M: int, N: int, K: int, sm_count: int = 132, device=None, stream_k: bool = False):
    """The default config for a GPU: the Hopper wgmma/TMA kernel on compute capability 9.0 devices
    (tile and raster from the GPU's measured tile table where it has one:
    :func:`fo_lib.gemm.sm90.default_config`), the portable mma.sync kernel elsewhere.
    ``FO_GEMM=portable`` forces the portable one. Whole waves unless ``stream_k`` (the overlap engine,
    its profiles and its measurements run whole waves; a plain ``gemm_nt`` without a config takes
    the stream-K tail where it pays)."""
    import os

    if os.environ.get("FO_GEMM", "auto") != "portable" and sm90.is_supported(device):
        return sm90.default_config(M, N, K, sm_count, stream_k=stream_k)
    return default_config(M, N, K, sm_count)
