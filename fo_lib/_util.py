"""Small helpers that several fo_lib modules share: the lazy imports of the GPU stack, integer
ceiling division, the dtype tags of the generated kernel sources, a device's SM count, and a GPU
sleep that lets events time the device rather than the host.

``import fo_lib._util`` needs neither torch nor CuPy: they are imported on first use, so the pure
core and the CPU compile checks run without them.
"""
from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

# The C++ tag type of each 16-bit element type (fo_lib/cuda/common.cuh), as generated sources spell it.
DTYPE_TAG = {"bf16": "fo::bf16_tag", "f16": "fo::f16_tag"}


class CudaUnavailableError(RuntimeError):
    """A GPU path was asked for where CuPy, NVRTC or a GPU is missing."""


# torch.cuda._sleep counts SM clock cycles: 2 GHz (above the H200's boost clock) errs on the long side.
SLEEP_CYCLES_PER_MS = 2_000_000


def gpu_sleep(ms: float) -> None:
    """Keep the current stream busy for about ``ms`` (at least): launches enqueued after it wait
    there, so events around them time the device, not the host's launches."""
    require_torch().cuda._sleep(int(ms * SLEEP_CYCLES_PER_MS))


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write, renamed over ``path`` once the ``with`` body ends:
    a reader or an interrupted run sees the old file or the new one, never part of one. If the body
    raises (an interrupt included) the temporary goes away and ``path`` is untouched.

    The temporary keeps ``path``'s suffix (``savefig`` picks the format from it) and starts with a
    dot, so globs over the folder do not pick it up."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}-{secrets.token_hex(4)}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_path` (the error, if any, propagates)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def user_cache() -> Path:
    """The user's fo_lib cache folder, not created here: ``$FO_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/fo_lib``, else ``~/.cache/fo_lib`` (compiled kernels, autotuning, calibration)."""
    if os.environ.get("FO_CACHE_DIR"):
        return Path(os.environ["FO_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fo_lib"


def user_lock_path(name: str) -> Path:
    """A lock file ``name`` of this user in the temporary folder: not beside the file it guards,
    where filelock may leave it behind on release."""
    import tempfile

    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"fo_lib-{uid}-{name}.lock"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def require_torch():
    """The torch module, or :class:`CudaUnavailableError` naming the fix."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise CudaUnavailableError("the GPU entry points take torch tensors: install torch") from exc
    return torch


def require_cupy():
    """The cupy module with at least one visible GPU, or :class:`CudaUnavailableError`."""
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


@lru_cache(maxsize=None)
def device_limits(device_index: int) -> tuple[int, int]:
    """(SM count, opt-in shared memory per block) of a device."""
    import cupy
    with cupy.cuda.Device(device_index):
        sms = cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMultiProcessorCount,
                                                   device_index)
        smem = cupy.cuda.runtime.deviceGetAttribute(
            cupy.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, device_index)
    return int(sms), int(smem)


def sm_count(device=None) -> int:
    """The SM count of a torch device (default: the current one)."""
    import torch
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    return device_limits(dev.index if dev.index is not None else torch.cuda.current_device())[0]
