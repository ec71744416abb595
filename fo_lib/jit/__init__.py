"""The JIT layer: :mod:`~fo_lib.jit.compiler` (NVRTC, cache key over every header, disk cache,
``get_kernel``) and :mod:`~fo_lib.jit.runtime` (prepared launches on torch streams, their memo,
pointer checks), both re-exported here. :mod:`fo_lib.kernel_catalog`, the list of kernel sources CI
compiles, imports the kernel modules and is imported by name only: nothing here imports it, so the
kernel modules can import this package.
"""
from .._util import CudaUnavailableError, require_cupy
from .compiler import (ARCHS, CUDA_DIR, KernelCompileError, cache_dir, cached_compile, check_arch,
                       compile_cubin, compile_with_log,
                       current_arch, ensure_cubin, get_kernel, nvrtc_options, nvrtc_version, reload_headers,
                       source_key)
from .runtime import LaunchMemo, PreparedLaunch, capture_graph, check_cuda_tensor, launch, memo_key, ptr, tensor_signature

__all__ = ["ARCHS", "CUDA_DIR", "CudaUnavailableError", "KernelCompileError", "LaunchMemo", "PreparedLaunch",
           "cache_dir", "cached_compile", "capture_graph", "check_arch", "check_cuda_tensor", "compile_cubin", "compile_with_log", "current_arch",
           "ensure_cubin", "get_kernel", "launch", "memo_key", "nvrtc_options", "nvrtc_version", "ptr",
           "reload_headers", "require_cupy", "source_key", "tensor_signature"]
