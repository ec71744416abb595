"""The catalog: every kernel source fo_lib generates, and the targets it must compile for.

CI compiles each for every target it declares (tests/test_kernels.py, NVRTC only, no GPU), and
``python -m fo_lib build`` fills the disk cache with them (:func:`build_all`). The list is explicit:
a kernel module exposes a generator of ``(label, source)`` pairs and is named here; this module
imports the kernel modules, never the reverse.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from . import counting
from .comm import loopback
from .gemm import portable, sm90
from .jit.compiler import ARCHS, KernelCompileError, cached_compile, check_arch, current_arch
from .postops import kernel as post_reorder


@dataclass(frozen=True)
class CompileCheck:
    """A generator of ``(label, source)`` pairs and the targets its sources exist on."""

    sources: Callable[[], Iterable[tuple[str, str]]]
    archs: tuple[str, ...] = ARCHS

    def __post_init__(self) -> None:
        object.__setattr__(self, "archs", tuple(check_arch(a) for a in self.archs))


CHECKS: tuple[CompileCheck, ...] = (
    CompileCheck(counting.compile_check_sources),
    CompileCheck(portable.compile_check_sources),
    CompileCheck(sm90.compile_check_sources, archs=(sm90.ARCH,)),  # wgmma and setmaxnreg: sm_90a only
    CompileCheck(post_reorder.compile_check_sources),
    CompileCheck(loopback.compile_check_sources),
)


def compile_check_sources(arch: str | None = None) -> Iterator[tuple[str, str]]:
    """``(label, source)`` of every cataloged kernel; with ``arch``, only those built for that target."""
    if arch is not None:
        check_arch(arch)
    for check in CHECKS:
        if arch is None or arch in check.archs:
            yield from check.sources()


def compile_check_cases() -> Iterator[tuple[str, str, str]]:
    """``(label, source, arch)`` for every cataloged source and every target it declares."""
    for check in CHECKS:
        for label, source in check.sources():
            for arch in check.archs:
                yield label, source, arch


def _build_one(job: tuple[str, str, str]) -> tuple[str, str, float, str | None]:
    label, source, arch = job
    t0 = time.perf_counter()
    try:
        cached_compile(source, arch)
    except KernelCompileError as exc:
        # returned, not raised: one bad source must not stop the others (its test recompiles it and
        # raises there, with the log)
        return label, arch, time.perf_counter() - t0, str(exc).splitlines()[0]
    return label, arch, time.perf_counter() - t0, None


def build_cases(cases: Iterable[tuple[str, str, str]], jobs: int | None = None,
                progress: bool = False) -> list[tuple[str, str, float, str | None]]:
    """Compile ``(label, source, arch)`` cases into the disk cache, in parallel processes, skipping
    those already there; returns ``(label, arch, seconds, error or None)`` per case. The processes
    are spawned, not forked: the caller may hold torch's or CUDA's threads."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    work = list(cases)
    jobs = jobs or max(1, min(len(work), os.cpu_count() or 1))
    pool = None
    if jobs > 1 and len(work) > 1:
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
    try:
        results = pool.map(_build_one, work) if pool else map(_build_one, work)
        if progress:
            from tqdm.auto import tqdm
            results = tqdm(results, total=len(work), desc="compiling kernels", unit="kernel")
        return list(results)
    finally:
        if pool:
            pool.shutdown()


def build_all(arch: str | None = None, jobs: int | None = None,
              progress: bool = False) -> list[tuple[str, float]]:
    """Compile every cataloged kernel for ``arch`` (default: this device) into the disk cache, in
    parallel processes; returns (label, seconds) per source. Later ``get_kernel`` calls hit the cache."""
    arch = arch or current_arch()
    done = build_cases(((label, src, arch) for label, src in compile_check_sources(arch)), jobs, progress)
    failed = [(label, err) for label, _, _, err in done if err]
    if failed:
        raise KernelCompileError(f"{len(failed)} of {len(done)} kernels failed to compile for {arch}; "
                                 f"first: {failed[0][0]}: {failed[0][1]}")
    return [(label, seconds) for label, _, seconds, _ in done]
