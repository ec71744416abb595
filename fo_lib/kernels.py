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
import shlex
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
# ELF image, _whole_elf).
_CACHE_FORMAT = 2


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
def launch(kernel, grid, block, args, *, stream=None, device_index: int, shared_mem: int = 0) -> None:
    """Launch a RawKernel on a torch stream (default: the device's current stream)."""
    PreparedLaunch(kernel, grid, block, args, device_index=device_index, shared_mem=shared_mem)(stream)


_CUDA_ERROR_INVALID_CONTEXT = 201


def _dim3(v, what: str) -> tuple[int, int, int]:
    v = tuple(int(x) for x in (v if isinstance(v, (tuple, list)) else (v,)))
    if not 1 <= len(v) <= 3 or any(x < 1 for x in v):
        raise ValueError(f"{what} must be 1 to 3 positive sizes, got {v}")
    return v + (1,) * (3 - len(v))


class PreparedLaunch:
    """One kernel launch whose arguments are packed once; each call enqueues it with a single driver
    call (``cuLaunchKernel``) on a torch stream.

    A CuPy launch repacks its arguments and enters device and stream contexts every time; with the
    operand checks around it, one eager GEMM launch cost 107 us of host time against cuBLAS's 25
    (docs/perf-log.md, session 5). Hot paths (the engine's waits, a plan's GEMM and post-reorder)
    prepare their launches once and call them.

    ``args`` are NumPy scalars or one-element NumPy arrays (a TMA map is a ``void128``): each has an
    exact size, so what the kernel reads is what was meant. The launch keeps its own copies of them
    and, in ``keep``, any objects whose addresses they hold.
    """

    __slots__ = ("kernel", "grid", "block", "shared_mem", "device_index", "_fn", "_values", "_params",
                 "_params_ptr", "_keep")

    def __init__(self, kernel, grid, block, args, *, device_index: int, shared_mem: int = 0, keep=()):
        import numpy as np

        self.kernel, self.device_index, self.shared_mem = kernel, int(device_index), int(shared_mem)
        self.grid, self.block = _dim3(grid, "grid"), _dim3(block, "block")
        values = []
        for i, a in enumerate(args):
            if not isinstance(a, (np.generic, np.ndarray)) or np.asarray(a).size != 1:
                raise TypeError(f"kernel argument {i} must be a NumPy scalar or one-element array "
                                f"(an exact C type), got {type(a).__name__}")
            values.append(np.array(a).reshape(-1).copy())
        self._values = values
        self._params = np.array([v.ctypes.data for v in values], dtype=np.uintp)
        self._params_ptr = int(self._params.ctypes.data) if values else 0
        self._keep = keep
        with _cupy().cuda.Device(self.device_index):
            self._fn = int(kernel.kernel.ptr)  # the CUfunction, loaded in this device's context

    def __call__(self, stream=None) -> None:
        """Enqueue on ``stream``: a torch stream, a raw ``cudaStream_t`` as an int, or None (the
        device's current torch stream)."""
        from cupy_backends.cuda.api import driver

        handle = _raw_stream(stream, self.device_index)
        if _current_device() != self.device_index:
            with _cupy().cuda.Device(self.device_index):
                return self._launch(driver, handle)
        try:
            self._launch(driver, handle)
        except driver.CUDADriverError as exc:
            # A thread on which no runtime call has made the device's context current yet.
            if getattr(exc, "status", None) != _CUDA_ERROR_INVALID_CONTEXT:
                raise
            with _cupy().cuda.Device(self.device_index):
                self._launch(driver, handle)

    def _launch(self, driver, handle: int) -> None:
        gx, gy, gz = self.grid
        bx, by, bz = self.block
        driver.launchKernel(self._fn, gx, gy, gz, bx, by, bz, self.shared_mem, handle, self._params_ptr, 0)


class LaunchMemo:
    """Prepared launches by the signatures of their tensors (:func:`memo_key`), first in first out.

    A call whose tensors have the same addresses, shapes, strides, dtypes and devices as an earlier
    call's (and the same other key parts) would pass the same checks and pack the same arguments, so
    it may reuse that call's :class:`PreparedLaunch`: a few microseconds of host time instead of
    ~100. Nothing here holds a tensor: a freed address reused by an equal tensor gets equal
    arguments."""

    def __init__(self, size: int = 256):
        self.size = size
        self._launches: dict = {}
        self._lock = threading.Lock()  # eviction and insertion (lookups need none)

    def get(self, key):
        """The launch under ``key``, or None (also for a ``None`` or unhashable key)."""
        if key is None:
            return None
        try:
            return self._launches.get(key)
        except TypeError:  # an unhashable key part: the caller's checks name it
            return None

    def put(self, key, launch) -> None:
        if key is None:
            return
        try:
            hash(key)
        except TypeError:
            return
        with self._lock:
            if len(self._launches) >= self.size:
                del self._launches[next(iter(self._launches))]
            self._launches[key] = launch

    def get_or_build(self, key, build):
        """The launch under ``key``, else ``build()`` (which checks everything) stored there."""
        launch = self.get(key)
        if launch is None:
            launch = build()
            self.put(key, launch)
        return launch

    def clear(self) -> None:
        self._launches.clear()


def tensor_signature(t):
    """What a tensor argument's checks and kernel arguments depend on (``()`` for None, None for
    anything that is not a tensor)."""
    import torch
    if t is None:
        return ()
    if not isinstance(t, torch.Tensor):
        return None
    return (t.data_ptr(), t.dtype, t.device, t.shape, t.stride())


def memo_key(head: tuple, *tensors):
    """``head`` plus every tensor's signature; None if any argument is not a tensor (no memo)."""
    sigs = tuple(tensor_signature(t) for t in tensors)
    return None if None in sigs else head + sigs


def _current_device() -> int:
    import torch
    return torch.cuda.current_device()


def _raw_stream(stream, device_index: int) -> int:
    """The ``cudaStream_t`` of ``stream`` (see :meth:`PreparedLaunch.__call__`)."""
    if stream is None:
        import torch
        get = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # no Python Stream object: ~10x cheaper
        return int(get(device_index)) if get is not None else int(torch.cuda.current_stream(device_index).cuda_stream)
    if isinstance(stream, int):
        return stream
    return int(stream.cuda_stream)


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
