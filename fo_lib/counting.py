"""The counting table: per-group tile counters that the signaled GEMM bumps and the comm stream waits on.

Protocol (producer side in ``gemm_mma.cuh``, consumer side in ``wait.cuh``):

* the GEMM epilogue stores a tile, ``__syncthreads()``, then one thread does a GPU-scope release add
  on ``counter[tile_group[tile]]``;
* the communication stream runs one single-thread :func:`wait_counter` per group: an acquire-load
  spin until the counter reaches its target, then the group's collective is enqueued behind it;
* counters are never reset: call ``e`` of a plan waits for ``e * tiles_in_group`` (compared modulo
  2^32), so there is no reset kernel and no ABA between back-to-back calls. The engine keeps ``e - 1``
  in a device word that the communication stream bumps after its last wait (:func:`wait_epoch`), so
  every call enqueues the same launches (one CUDA graph replays them); :class:`EpochTargets` computes
  the same targets on the host for callers that pass them explicitly (:func:`wait_counter`);
* a wait that is not satisfied within ``timeout_ns`` records its group in a device error word and
  returns instead of hanging; the host raises :class:`WaitError` when it reads the word.

NOTES: every kernel that a producer stream launches while a wait spins must already be loaded
(CUDA loads modules lazily, and loading waits for the device that the spinning wait holds): warm up
before enqueuing waits.
"""
from __future__ import annotations

import numpy as np

from . import jit
from ._util import require_cupy, require_torch

_check_cuda = jit.check_cuda_tensor


WAIT_KERNEL = "fo_wait_counter"
WAIT_EPOCH_KERNEL = "fo_wait_epoch"
BUMP_KERNEL = "fo_bump_counter"


def wait_source() -> str:
    """The NVRTC source holding both ``fo_wait_counter`` and ``fo_bump_counter``."""
    return f"""#include "wait.cuh"
extern "C" __global__ void {WAIT_KERNEL}(const fo::u32* counter, int group, fo::u32 target, fo::u32* error,
                                        fo::u64 timeout_ns) {{
  if (threadIdx.x == 0 && blockIdx.x == 0) fo::wait_counter(counter, group, target, error, timeout_ns);
}}
extern "C" __global__ void {WAIT_EPOCH_KERNEL}(const fo::u32* counter, int group, fo::u32 group_tiles,
                                              const fo::u32* epoch, fo::u32* error, fo::u64 timeout_ns) {{
  // The call's epoch lives on the device (bumped by the stream after its last collective), so the
  // same launch, or a CUDA graph holding it, serves every call.
  if (threadIdx.x == 0 && blockIdx.x == 0)
    fo::wait_counter(counter, group, (fo::ld_relaxed_gpu(epoch) + 1u) * group_tiles, error, timeout_ns);
}}
extern "C" __global__ void {BUMP_KERNEL}(fo::u32* counter, int group, fo::u32 value) {{
  if (threadIdx.x == 0 && blockIdx.x == 0) fo::bump_counter(counter, group, value);
}}
"""


class WaitError(RuntimeError):
    """A ``wait_counter`` launch timed out; ``group`` is the first group that did."""

    def __init__(self, group: int, raw: int | None = None):
        self.group = int(group)
        super().__init__(f"counter wait for group {self.group} timed out on the device (error word "
                         f"{raw if raw is not None else self.group + 1}): the producer never reached its target")


def _counter_checks(counter, group: int, what: str = "counter"):
    torch = require_torch()
    _check_cuda(counter, what, None)
    if counter.dtype not in (torch.int32, getattr(torch, "uint32", torch.int32)):
        raise TypeError(f"{what} must be int32 (or uint32), got {counter.dtype}")
    if not counter.is_contiguous():
        raise ValueError(f"{what} must be contiguous")
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)) or not 0 <= group < counter.numel():
        raise IndexError(f"group {group!r} out of range for a {what} of {counter.numel()} entries")


def _wait_kernel(name: str, device_index: int):
    with require_cupy().cuda.Device(device_index):
        return jit.get_kernel(wait_source(), name)


def _prepare_wait(name: str, counter, group: int, middle: tuple, error_word, timeout_ns: int, keep=()):
    """Validate what every wait kernel takes; the packed launch of ``name(counter, group, *middle,
    error_word, timeout_ns)``, one block of one thread."""
    torch = require_torch()
    _counter_checks(counter, group)
    _check_cuda(error_word, "error_word", counter.device)
    if error_word.dtype not in (torch.int32, getattr(torch, "uint32", torch.int32)) or error_word.numel() < 1:
        raise TypeError("error_word must be an int32 (or uint32) tensor with at least one element")
    if isinstance(timeout_ns, bool) or not isinstance(timeout_ns, (int, np.integer)) or not 0 < timeout_ns < 2**63:
        raise ValueError(f"timeout_ns must be a positive integer, got {timeout_ns!r}")
    kernel = _wait_kernel(name, counter.device.index)
    args = (jit.ptr(counter), np.int32(group), *middle, jit.ptr(error_word), np.uint64(int(timeout_ns)))
    return jit.PreparedLaunch(kernel, (1,), (1,), args, device_index=counter.device.index,
                                  keep=(counter, error_word, *keep))


def wait_counter(counter, group: int, target: int, error_word, timeout_ns: int, stream=None) -> None:
    """Enqueue on ``stream`` a single-thread wait until ``counter[group]`` reaches ``target``
    (modulo 2^32: pass ``epoch * tiles_in_group``). After ``timeout_ns`` it writes ``group + 1``
    to ``error_word`` (first failure wins) and returns; it returns at once if the word is set."""
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)):
        raise TypeError(f"target must be an integer, got {target!r}")
    _prepare_wait(WAIT_KERNEL, counter, group, (np.uint32(int(target) & 0xFFFFFFFF),), error_word,
                  timeout_ns)(stream)


def wait_epoch(counter, group: int, group_tiles: int, epoch_word, error_word, timeout_ns: int,
               stream=None) -> None:
    """Like :func:`wait_counter` with the target read on the device: ``(epoch_word[0] + 1) *
    group_tiles`` (modulo 2^32). The stream advances the epoch with ``bump_counter(epoch_word, 0)``
    after the call's last wait, so the launch sequence is the same on every call and can be captured
    once in a CUDA graph."""
    wait_epoch_launch(counter, group, group_tiles, epoch_word, error_word, timeout_ns)(stream)


def wait_epoch_launch(counter, group: int, group_tiles: int, epoch_word, error_word, timeout_ns: int):
    """:func:`wait_epoch` checked and packed once: a :class:`~fo_lib.jit.PreparedLaunch` that
    enqueues it when called with a stream (the engine's waits, every call)."""
    _counter_checks(epoch_word, 0, "epoch_word")
    if epoch_word.device != counter.device:
        raise ValueError(f"epoch_word is on {epoch_word.device}, the counter on {counter.device}")
    if isinstance(group_tiles, bool) or not isinstance(group_tiles, (int, np.integer)) or not 0 < group_tiles < 2**32:
        raise ValueError(f"group_tiles must be a positive integer, got {group_tiles!r}")
    return _prepare_wait(WAIT_EPOCH_KERNEL, counter, group, (np.uint32(group_tiles), jit.ptr(epoch_word)),
                         error_word, timeout_ns, keep=(epoch_word,))


def bump_counter(counter, group: int, value: int = 1, stream=None) -> None:
    """Enqueue ``counter[group] += value`` (release, GPU scope) on ``stream``."""
    bump_counter_launch(counter, group, value)(stream)


def bump_counter_launch(counter, group: int, value: int = 1):
    """:func:`bump_counter` checked and packed once (a :class:`~fo_lib.jit.PreparedLaunch`)."""
    _counter_checks(counter, group)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"value must be an integer, got {value!r}")
    kernel = _wait_kernel(BUMP_KERNEL, counter.device.index)
    args = (jit.ptr(counter), np.int32(group), np.uint32(int(value) & 0xFFFFFFFF))
    return jit.PreparedLaunch(kernel, (1,), (1,), args, device_index=counter.device.index, keep=(counter,))


def read_wait_error(error_word, stream=None) -> int | None:
    """Synchronize ``stream`` (default: the current stream) and return the timed-out group or None."""
    torch = require_torch()
    _check_cuda(error_word, "error_word", None)
    if stream is None:
        stream = torch.cuda.current_stream(error_word.device)
    stream.synchronize()
    raw = int(error_word.reshape(-1)[0].cpu()) & 0xFFFFFFFF
    return None if raw == 0 else raw - 1


def check_wait_error(error_word, stream=None) -> None:
    """Synchronize ``stream`` and raise :class:`WaitError` naming the group if a wait timed out."""
    group = read_wait_error(error_word, stream)
    if group is not None:
        raise WaitError(group, group + 1)


class EpochTargets:
    """Wait targets of successive calls for fixed group sizes: call ``e`` (1-based) waits for
    ``e * tiles_in_group`` on each counter, modulo 2^32."""

    def __init__(self, group_tiles):
        self.group_tiles = np.asarray(group_tiles, dtype=np.int64)
        if self.group_tiles.ndim != 1 or self.group_tiles.size == 0 or np.any(self.group_tiles <= 0):
            raise ValueError("group_tiles must be a non-empty 1-D array of positive tile counts")
        self.epoch = 0

    def next(self) -> list[int]:
        """Advance to the next call and return its per-group targets."""
        self.epoch += 1
        return [int(v) for v in (self.epoch * self.group_tiles) & 0xFFFFFFFF]


def compile_check_sources():
    """The wait and bump kernels' source (fo_lib.kernel_catalog: compiled for every target)."""
    yield "wait", wait_source()
