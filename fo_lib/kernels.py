"""Run-time compilation of the CUDA sources in ``fo_lib/cuda`` through NVRTC.

Kernels are ``.cuh`` templates. A host module generates a tiny source that includes one header and
instantiates one specialization behind an ``extern "C"`` entry point (every tile constant is a
template argument, so each specialization is its own cache entry). This module compiles such a
source to a cubin and loads it with CuPy.

* :func:`compile_cubin` needs only NVRTC (no driver, no GPU): CI compiles every kernel with it for
  every target in :data:`ARCHS`.
* :func:`get_kernel` compiles for the current device, caches the cubin on disk and returns a
  ``cupy.RawKernel``.

NOTES: every header under ``fo_lib/cuda`` is handed to NVRTC in memory and hashed into the cache
key (CuPy's own cache ignores included headers, so an edited header would reuse a stale binary).
``sm_90a`` is chosen only on a 9.0 device: its cubin runs nowhere else.

Environment: ``FO_CACHE_DIR`` (default ``~/.cache/fo_lib``), ``FO_JIT_DEBUG=1`` prints each
generated source and the full NVRTC log.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from pathlib import Path

CUDA_DIR = Path(__file__).resolve().parent / "cuda"
ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90a")

_BASE_OPTIONS = ("-std=c++17", "-DNDEBUG", "--use_fast_math", "-default-device")


class KernelCompileError(RuntimeError):
    """NVRTC rejected a source; the message carries the full log."""


class CudaUnavailableError(RuntimeError):
    """A GPU path was asked for where CuPy, NVRTC or a GPU is missing."""


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise CudaUnavailableError(
            "compiling kernels needs CuPy with NVRTC: pip install 'fo_lib[cuda12]' (or [cuda13])") from exc
    return nvrtc


def nvrtc_version() -> tuple[int, int]:
    return tuple(_nvrtc().getVersion())


def nvrtc_options(arch: str) -> tuple[str, ...]:
    if arch not in ARCHS:
        raise ValueError(f"unknown target {arch!r}; choose one of {ARCHS}")
    return (*_BASE_OPTIONS, f"-arch={arch}", f"-DFO_ARCH={arch[3:5]}")


@lru_cache(maxsize=1)
def _headers() -> tuple[tuple[str, ...], tuple[bytes, ...]]:
    names = sorted(p.name for p in CUDA_DIR.glob("*.cuh"))
    return tuple(names), tuple((CUDA_DIR / n).read_bytes() for n in names)


def reload_headers() -> None:
    """Forget the header snapshot (after editing ``fo_lib/cuda`` in a live session)."""
    _headers.cache_clear()
    _by_source.clear()  # the same generated source must now be looked up (and compiled) anew


def source_key(source: str, arch: str) -> str:
    """Cache key over the source, every header, the options and the NVRTC version."""
    h = hashlib.sha256()
    for part in (source.encode(), *_headers()[1], " ".join(nvrtc_options(arch)).encode(),
                 repr(nvrtc_version()).encode(), *[n.encode() for n in _headers()[0]]):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:32]


def _debug() -> bool:
    return os.environ.get("FO_JIT_DEBUG", "") not in ("", "0")


def compile_cubin(source: str, arch: str, name: str = "fo_kernel.cu") -> bytes:
    """Compile a generated source for ``arch``; raise :class:`KernelCompileError` with the log."""
    return compile_with_log(source, arch, name)[0]


def compile_with_log(source: str, arch: str, name: str = "fo_kernel.cu",
                     extra_options: Iterable[str] = ()) -> tuple[bytes, str]:
    """:func:`compile_cubin` plus NVRTC's log; ``extra_options`` e.g. ``("--ptxas-options=-v",)`` puts
    ptxas' register / spill report in the log."""
    nvrtc = _nvrtc()
    names, contents = _headers()
    options = (*nvrtc_options(arch), *extra_options)
    if _debug():
        print(f"--- fo_lib JIT source ({arch}) ---\n{source}")
    prog = nvrtc.createProgram(source, name, list(contents), [n.encode() for n in names])
    try:
        try:
            nvrtc.compileProgram(prog, list(options))
        except nvrtc.NVRTCError as exc:
            log = nvrtc.getProgramLog(prog)
            raise KernelCompileError(f"NVRTC failed for {name} ({arch}, options {' '.join(options)}):\n"
                                     f"{log}\n--- source ---\n{source}") from exc
        log = nvrtc.getProgramLog(prog)
        log = (log.decode(errors="replace") if isinstance(log, bytes) else str(log)).rstrip("\x00")
        if _debug():
            print(f"--- NVRTC log ---\n{log}")
        return nvrtc.getCUBIN(prog), log
    finally:
        nvrtc.destroyProgram(prog)


def cache_dir() -> Path:
    path = Path(os.environ.get("FO_CACHE_DIR", Path.home() / ".cache" / "fo_lib"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cupy():
    try:
        import cupy
    except ImportError as exc:
        raise CudaUnavailableError("GPU kernels need CuPy: pip install 'fo_lib[cuda12]' (or [cuda13])") from exc
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            raise CudaUnavailableError("no CUDA GPU is visible")
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise CudaUnavailableError(f"no usable CUDA GPU: {exc}") from exc
    return cupy


def current_arch() -> str:
    """The NVRTC target for the current device (sm_90a on 9.0, else sm_XY)."""
    cupy = _cupy()
    cc = cupy.cuda.Device().compute_capability
    return "sm_90a" if cc == "90" else f"sm_{cc}"


def _ensure_cubin(source: str, arch: str, name: str) -> Path:
    """Path of the cached cubin for (source, arch), compiling it first if needed."""
    path = cache_dir() / f"{source_key(source, arch)}_{arch}.cubin"
    if not path.exists():
        cubin = compile_cubin(source, arch, name=name)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(cubin)
        tmp.replace(path)  # atomic: concurrent processes never read a half-written file
    return path


def _build_one(job: tuple[str, str, str]) -> tuple[str, float]:
    label, source, arch = job
    t0 = time.perf_counter()
    _ensure_cubin(source, arch, "fo_kernel.cu")
    return label, time.perf_counter() - t0


def build_all(arch: str | None = None, jobs: int | None = None) -> list[tuple[str, float]]:
    """Compile every registered kernel for ``arch`` (default: this device) into the disk cache,
    in parallel processes; returns (label, seconds) per source. Later ``get_kernel`` calls hit the cache."""
    from concurrent.futures import ProcessPoolExecutor

    arch = arch or current_arch()
    work = [(label, src, arch) for label, src in compile_check_sources(arch)]
    jobs = jobs or max(1, min(len(work), os.cpu_count() or 1))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(_build_one, work))


_lock = threading.Lock()
_loaded: dict[tuple[str, str, int], object] = {}
_by_source: dict[tuple[str, str, int], object] = {}  # (source text, kernel, device) -> kernel


def get_kernel(source: str, kernel_name: str):
    """Compile (or fetch from the disk cache) ``source`` for this device; return the RawKernel."""
    cupy = _cupy()
    device = cupy.cuda.Device().id
    # Launch paths call this per launch (a wait kernel per wave group): look the source text up first,
    # since hashing it with every header costs tens of microseconds of host time.
    hit = _by_source.get((source, kernel_name, device))
    if hit is not None:
        return hit
    arch = current_arch()
    key = source_key(source, arch)
    with _lock:
        hit = _loaded.get((key, kernel_name, device))
        if hit is not None:
            _by_source[(source, kernel_name, device)] = hit
            return hit
        path = _ensure_cubin(source, arch, f"{kernel_name}.cu")
        module = cupy.RawModule(path=str(path))
        kernel = module.get_function(kernel_name)
        _loaded[(key, kernel_name, device)] = kernel
        _by_source[(source, kernel_name, device)] = kernel
        return kernel


# --- launching on torch streams -----------------------------------------------------------------
_streams: dict[tuple[int, int], object] = {}


def cupy_stream(torch_stream, device_index: int):
    """A (cached) CuPy view of a torch CUDA stream."""
    import warnings

    cupy = _cupy()
    key = (int(torch_stream.cuda_stream), device_index)
    s = _streams.get(key)
    if s is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # ExternalStream: deprecated in CuPy 14
            s = cupy.cuda.ExternalStream(key[0], device_index)
        _streams[key] = s
    return s


def launch(kernel, grid, block, args, *, stream=None, device_index: int, shared_mem: int = 0) -> None:
    """Launch a RawKernel on a torch stream (default: the device's current stream)."""
    import torch

    cupy = _cupy()
    if stream is None:
        stream = torch.cuda.current_stream(device_index)
    with cupy.cuda.Device(device_index), cupy_stream(stream, device_index):
        kernel(tuple(grid), tuple(block), args, shared_mem=shared_mem)


def check_cuda_tensor(t, what: str, device=None) -> None:
    """Raise unless ``t`` is a CUDA tensor (on ``device``, when given)."""
    if not getattr(t, "is_cuda", False):
        raise ValueError(f"{what} must be a CUDA tensor, got device {getattr(t, 'device', type(t).__name__)}")
    if device is not None and t.device != device:
        raise ValueError(f"{what} is on {t.device}, expected {device}")


def ptr(t):
    """A tensor's device address as a kernel argument (0 for None)."""
    import numpy as np
    return np.uint64(0 if t is None else t.data_ptr())


# --- compile-check registry (CI compiles every registered source for every target it supports) --
_compile_checks: list[Callable[[], Iterable[tuple[str, str]]]] = []
_compile_check_archs: dict[Callable, tuple[str, ...]] = {}  # targets of each registered generator


def register_compile_check(fn: Callable[[], Iterable[tuple[str, str]]] | None = None, *,
                           archs: Iterable[str] = ARCHS):
    """Decorator: ``fn()`` yields ``(label, source)`` pairs that must compile for every target in
    ``archs`` (default: all of :data:`ARCHS`). Use bare, or as ``@register_compile_check(archs=("sm_90a",))``
    for sources that exist on one target only (wgmma, setmaxnreg)."""
    archs = tuple(archs)
    for a in archs:
        if a not in ARCHS:
            raise ValueError(f"unknown target {a!r}; choose from {ARCHS}")

    def register(f):
        _compile_checks.append(f)
        _compile_check_archs[f] = archs
        return f

    return register if fn is None else register(fn)


def _register_all() -> None:
    # Importing the host modules registers their generators.
    from . import counting, gemm, gemm_sm90, postops  # noqa: F401
    from .comm import loopback  # noqa: F401


def compile_check_sources(arch: str | None = None) -> Iterator[tuple[str, str]]:
    """``(label, source)`` of every registered kernel; with ``arch``, only those built for that target."""
    if arch is not None and arch not in ARCHS:
        raise ValueError(f"unknown target {arch!r}; choose one of {ARCHS}")
    _register_all()
    for fn in _compile_checks:
        if arch is None or arch in _compile_check_archs[fn]:
            yield from fn()


def compile_check_cases() -> Iterator[tuple[str, str, str]]:
    """``(label, source, arch)`` for every registered source and every target it declares."""
    _register_all()
    for fn in _compile_checks:
        for label, source in fn():
            for arch in _compile_check_archs[fn]:
                yield label, source, arch
