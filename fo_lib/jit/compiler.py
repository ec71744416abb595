"""Run-time compilation of the CUDA sources in ``fo_lib/cuda`` through NVRTC, and the disk cache.

Kernels are ``.cuh`` templates. A host module generates a tiny source that includes one header and
instantiates one specialization behind an ``extern "C"`` entry point (every tile constant is a
template argument, so each specialization is its own cache entry). This module compiles such a
source to a cubin and loads it with CuPy.

* :func:`compile_cubin` needs only NVRTC (no driver, no GPU): CI compiles every kernel of
  :mod:`fo_lib.kernel_catalog` with it for every target in :data:`ARCHS`.
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
import shlex
import threading
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from .._util import CudaUnavailableError, atomic_write, require_cupy, user_cache, user_lock_path

CUDA_DIR = Path(__file__).resolve().parent.parent / "cuda"
ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90a")

_BASE_OPTIONS = ("-std=c++17", "-DNDEBUG", "--use_fast_math", "-default-device")

__all__ = ["ARCHS", "CUDA_DIR", "CudaUnavailableError", "KernelCompileError", "cache_dir", "cached_compile", "check_arch",
           "compile_cubin", "compile_with_log", "current_arch", "ensure_cubin", "get_kernel", "nvrtc_options",
           "nvrtc_version", "reload_headers", "source_key"]


class KernelCompileError(RuntimeError):
    """NVRTC rejected a source; the message carries the full log."""


def check_arch(arch: str) -> str:
    if arch not in ARCHS:
        raise ValueError(f"unknown target {arch!r}; choose one of {ARCHS}")
    return arch


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
    check_arch(arch)
    # FO_NVRTC_OPTIONS (e.g. "-DNAME=1"): extra options for kernel experiments; they are part of
    # every cache key, like the rest of these options. Set it before a process's first launch: the
    # GEMM families keep their prepared launches (and so their kernels) for the process.
    extra = tuple(shlex.split(os.environ.get("FO_NVRTC_OPTIONS", "")))
    return (*_BASE_OPTIONS, f"-arch={arch}", f"-DFO_ARCH={arch[3:5]}", *extra)


@lru_cache(maxsize=1)
def _headers() -> tuple[tuple[str, ...], tuple[bytes, ...]]:
    names = sorted(p.name for p in CUDA_DIR.glob("*.cuh"))
    return tuple(names), tuple((CUDA_DIR / n).read_bytes() for n in names)


def reload_headers() -> None:
    """Forget the header snapshot (after editing ``fo_lib/cuda`` in a live session)."""
    _headers.cache_clear()
    _by_source.clear()  # the same generated source must now be looked up (and compiled) anew


# Bumped when what the cache stores changes for the same key parts (2: cubins padded to their whole
# ELF image, _whole_elf; 3: ptxas' report beside each cubin, every program named fo_kernel.cu).
_CACHE_FORMAT = 3


def source_key(source: str, arch: str) -> str:
    """Cache key over the source, every header, the options, the NVRTC version and the cache format."""
    h = hashlib.sha256()
    for part in (f"format {_CACHE_FORMAT}".encode(), source.encode(), *_headers()[1],
                 " ".join(nvrtc_options(arch)).encode(),
                 repr(nvrtc_version()).encode(), *[n.encode() for n in _headers()[0]]):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:32]


def _debug() -> bool:
    return os.environ.get("FO_JIT_DEBUG", "") not in ("", "0")


def _whole_elf(cubin: bytes) -> bytes:
    """CuPy's getCUBIN returns the image one byte short. The driver loads it anyway, but cuobjdump
    and nvdisasm reject the file: pad the image back to the end of its ELF program and section header
    tables with zero bytes (in the cubins seen, the byte cut off ends the last program header and is
    zero)."""
    import struct

    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        return cubin
    ph_off, sh_off = struct.unpack_from("<QQ", cubin, 0x20)
    ph_size, ph_num, sh_size, sh_num = struct.unpack_from("<HHHH", cubin, 0x36)
    end = max(ph_off + ph_size * ph_num, sh_off + sh_size * sh_num)
    return cubin + b"\0" * (end - len(cubin)) if len(cubin) < end else cubin


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
        return _whole_elf(nvrtc.getCUBIN(prog)), log
    finally:
        nvrtc.destroyProgram(prog)


def cache_dir() -> Path:
    path = user_cache()
    path.mkdir(parents=True, exist_ok=True)
    return path


def current_arch() -> str:
    """The NVRTC target for the current device (sm_90a on 9.0, else sm_XY)."""
    cupy = require_cupy()
    cc = cupy.cuda.Device().compute_capability
    return "sm_90a" if cc == "90" else f"sm_{cc}"


def _is_whole_cubin(data: bytes) -> bool:
    """An ELF image that reaches the end of its header tables (a cache entry cut short or garbage
    fails this and is compiled again)."""
    return len(data) >= 64 and data[:4] == b"\x7fELF" and _whole_elf(data) == data


def cached_compile(source: str, arch: str) -> tuple[bytes, str]:
    """The cubin for ``(source, arch)`` and ptxas' report (registers, spills), from the disk cache or
    compiled once and stored. Compiled with ``--ptxas-options=-v``, which changes the log and not the
    cubin, so the compile check, the ptxas-report tests and the kernels' launches share one entry.
    The program is always named ``fo_kernel.cu`` (the name is in the cubin): its bytes are a function
    of the key alone, the same as :func:`compile_cubin`'s."""
    cubin_path = _cubin_path(source, arch)
    log_path = cubin_path.with_suffix(".log")
    hit = _read_entry(cubin_path, log_path)
    if hit is not None:
        return hit
    # Processes building the same sources at once (parallel test workers, two notebooks) compile
    # each entry once: the others wait for it and read it.
    with _compile_lock(cubin_path.stem):
        hit = _read_entry(cubin_path, log_path)
        if hit is not None:
            return hit
        cubin, log = compile_with_log(source, arch, extra_options=("--ptxas-options=-v",))
        atomic_write(log_path, log.encode())  # the log first: a cubin in the cache implies its log
        atomic_write(cubin_path, cubin)
    return cubin, log


def _read_entry(cubin_path: Path, log_path: Path) -> tuple[bytes, str] | None:
    try:
        cubin, log = cubin_path.read_bytes(), log_path.read_text()
    except OSError:
        return None
    return (cubin, log) if _is_whole_cubin(cubin) else None


def _compile_lock(key: str):
    """One of 64 lock files in the temporary folder, by ``key`` (not one per entry beside the cache:
    filelock may leave its file behind, and a shared stripe only makes an unrelated compile wait)."""
    from filelock import FileLock

    stripe = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 64
    return FileLock(str(user_lock_path(f"compile-{stripe}")))


def _cubin_path(source: str, arch: str) -> Path:
    return cache_dir() / f"{source_key(source, arch)}_{arch}.cubin"


def ensure_cubin(source: str, arch: str) -> Path:
    """Path of the cached cubin for (source, arch), compiling it first if needed."""
    cached_compile(source, arch)
    return _cubin_path(source, arch)


_lock = threading.Lock()
_loaded: dict[tuple[str, str, int], object] = {}
_by_source: dict[tuple[str, str, int], object] = {}  # (source text, kernel, device) -> kernel


def get_kernel(source: str, kernel_name: str):
    """Compile (or fetch from the disk cache) ``source`` for this device; return the RawKernel."""
    cupy = require_cupy()
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
        path = ensure_cubin(source, arch)
        module = cupy.RawModule(path=str(path))
        kernel = module.get_function(kernel_name)
        _loaded[(key, kernel_name, device)] = kernel
        _by_source[(source, kernel_name, device)] = kernel
        return kernel
