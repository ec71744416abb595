"""Launching compiled kernels on torch streams: packed launches, their memo, and the checks of the
pointers they take.

A CuPy launch repacks its arguments and enters device and stream contexts every time; with the
operand checks around it, an eager GEMM launch cost several times cuBLAS's host time
(docs/decisions.md, "A launch is packed once and memoized by its tensors' signatures"). Hot paths (the engine's waits, a plan's GEMM
and post-reorder) therefore pack a :class:`PreparedLaunch` once and call it, and calls with the same
tensors find theirs in a :class:`LaunchMemo`.
"""
from __future__ import annotations

import contextlib
import gc
import threading

from .._util import require_cupy

__all__ = ["LaunchMemo", "PreparedLaunch", "capture_graph", "check_cuda_tensor", "launch", "memo_key", "ptr",
           "tensor_signature"]


@contextlib.contextmanager
def capture_graph(graph, stream=None, capture_error_mode: str = "global"):
    """``torch.cuda.graph(graph, stream=...)`` with Python's cyclic garbage collector run before and
    kept off during the capture. Dropped objects in reference cycles (a plan held by an exception's
    traceback, say) are freed whenever the collector runs; freeing a CUDA graph or event inside a
    capture is an operation the driver refuses there, and it invalidates the capture (docs/decisions.md,
    "No garbage is collected inside a graph capture")."""
    import torch

    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.graph(graph, stream=stream, capture_error_mode=capture_error_mode):
            yield graph
    finally:
        if was_enabled:
            gc.enable()


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
        with require_cupy().cuda.Device(self.device_index):
            self._fn = int(kernel.kernel.ptr)  # the CUfunction, loaded in this device's context

    def __call__(self, stream=None) -> None:
        """Enqueue on ``stream``: a torch stream, a raw ``cudaStream_t`` as an int, or None (the
        device's current torch stream)."""
        from cupy_backends.cuda.api import driver

        handle = _raw_stream(stream, self.device_index)
        if _current_device() != self.device_index:
            with require_cupy().cuda.Device(self.device_index):
                return self._launch(driver, handle)
        try:
            self._launch(driver, handle)
        except driver.CUDADriverError as exc:
            # A thread on which no runtime call has made the device's context current yet.
            if getattr(exc, "status", None) != _CUDA_ERROR_INVALID_CONTEXT:
                raise
            with require_cupy().cuda.Device(self.device_index):
                self._launch(driver, handle)

    def _launch(self, driver, handle: int) -> None:
        gx, gy, gz = self.grid
        bx, by, bz = self.block
        driver.launchKernel(self._fn, gx, gy, gz, bx, by, bz, self.shared_mem, handle, self._params_ptr, 0)


class LaunchMemo:
    """Prepared launches by the signatures of their tensors (:func:`memo_key`), first in first out.

    A call whose tensors have the same addresses, shapes, strides, dtypes and devices as an earlier
    call's (and the same other key parts) would pass the same checks and pack the same arguments, so
    it may reuse that call's :class:`PreparedLaunch` instead of checking and packing again. Nothing
    here holds a tensor: a freed address reused by an equal tensor gets equal arguments."""

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
