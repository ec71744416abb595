"""The JIT layer: every cataloged kernel source compiles for every target (CPU only, no GPU),
the cache key covers every header, and compile errors carry the log."""

import os
from pathlib import Path

import pytest

from fo_lib import jit
from fo_lib import kernel_catalog as catalog
from fo_lib.jit import compiler

ROOT = Path(__file__).resolve().parents[1]

SOURCES = list(catalog.compile_check_sources())
# (label, source, arch): each source for every target it declares (sm_90a-only ones: wgmma, TMA).
CASES = list(catalog.compile_check_cases())



@pytest.fixture(scope="module")
def built():
    """Every case compiled once into the disk cache, in parallel across the cores: each test below
    then reads its entry (or, for a source that failed here, compiles it again and shows the log)."""
    try:
        jit.nvrtc_version()
    except jit.CudaUnavailableError:
        return  # each test's nvrtc fixture skips, or fails in CI
    catalog.build_cases(CASES)


@pytest.mark.parametrize("label,source,arch", CASES, ids=[f"{label}-{arch}" for label, _, arch in CASES])
def test_every_kernel_compiles(label, source, arch, nvrtc, built):
    cubin, _ = jit.cached_compile(source, arch)
    assert cubin[:4] == b"\x7fELF"


def test_cubin_is_a_whole_elf_image(nvrtc):
    """The image reaches the end of its ELF header tables (CuPy's getCUBIN returns one byte short;
    cuobjdump and nvdisasm reject such a file)."""
    import struct

    label, source, arch = CASES[0]
    cubin = jit.compile_cubin(source, arch)
    ph_off, sh_off = struct.unpack_from("<QQ", cubin, 0x20)
    ph_size, ph_num, sh_size, sh_num = struct.unpack_from("<HHHH", cubin, 0x36)
    assert len(cubin) >= max(ph_off + ph_size * ph_num, sh_off + sh_size * sh_num)
    assert compiler._whole_elf(b"not an elf") == b"not an elf"


def test_extra_nvrtc_options_enter_the_cache_key(monkeypatch, nvrtc):
    monkeypatch.delenv("FO_NVRTC_OPTIONS", raising=False)
    plain_key = jit.source_key("x", "sm_80")
    monkeypatch.setenv("FO_NVRTC_OPTIONS", "-DFO_SOME_SWITCH=1")
    assert jit.nvrtc_options("sm_80")[-1] == "-DFO_SOME_SWITCH=1"
    assert jit.source_key("x", "sm_80") != plain_key


def test_catalog_covers_every_family():
    labels = " ".join(label for label, _ in SOURCES)
    for family in ("gemm", "post_reorder", "wait", "raster_tile"):
        assert family in labels, family
    assert len({label for label, _ in SOURCES}) == len(SOURCES)


def test_catalog_targets():
    """Sources cataloged for one target are offered for that target only; the rest for all."""
    per_arch = {arch: {label for label, _ in catalog.compile_check_sources(arch)} for arch in jit.ARCHS}
    assert {label for label, _ in SOURCES} == set().union(*per_arch.values())
    sm90_only = {label for label in per_arch["sm_90a"] if label.startswith("gemm_sm90 ")}
    assert sm90_only, "the sm_90a GEMM is cataloged"
    for arch in ("sm_80", "sm_86", "sm_89"):
        assert not sm90_only & per_arch[arch]
        assert per_arch[arch] == per_arch["sm_90a"] - sm90_only
    assert len(CASES) == sum(len(v) for v in per_arch.values())
    with pytest.raises(ValueError, match="unknown target"):
        list(catalog.compile_check_sources("sm_70"))
    with pytest.raises(ValueError, match="unknown target"):
        catalog.CompileCheck(lambda: iter(()), archs=("sm_100",))


def test_options_per_arch():
    assert "-arch=sm_90a" in jit.nvrtc_options("sm_90a")
    assert "-DNDEBUG" in jit.nvrtc_options("sm_80")
    with pytest.raises(ValueError, match="unknown target"):
        jit.nvrtc_options("sm_70")


def test_cache_key_covers_headers(tmp_path, monkeypatch, nvrtc):
    src = '#include "common.cuh"\nextern "C" __global__ void k(int* x) { x[0] = 1; }\n'
    key = jit.source_key(src, "sm_80")
    assert jit.source_key(src, "sm_86") != key
    for f in jit.CUDA_DIR.glob("*.cuh"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    monkeypatch.setattr(compiler, "CUDA_DIR", tmp_path)
    jit.reload_headers()
    try:
        assert jit.source_key(src, "sm_80") == key
        (tmp_path / "tile_schedule.cuh").write_text((tmp_path / "tile_schedule.cuh").read_text() + "\n// edit\n")
        jit.reload_headers()
        assert jit.source_key(src, "sm_80") != key  # a header the source does not even include
    finally:
        monkeypatch.undo()
        jit.reload_headers()


def test_cache_compiles_each_source_once_and_recompiles_a_bad_entry(tmp_path, monkeypatch, nvrtc):
    """One compile per (source, arch): later calls read the cubin and ptxas' report from the disk;
    an entry cut short or overwritten with garbage is compiled again, not loaded."""
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path))
    calls = []
    real = compiler.compile_with_log
    monkeypatch.setattr(compiler, "compile_with_log", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    src = 'extern "C" __global__ void k(int* x) { x[0] = 1; }\n'
    cubin, log = jit.cached_compile(src, "sm_80")
    assert cubin[:4] == b"\x7fELF" and "registers" in log
    assert jit.cached_compile(src, "sm_80") == (cubin, log) and calls == ["sm_80"]
    path = jit.ensure_cubin(src, "sm_80")
    assert path.read_bytes() == cubin and len(calls) == 1
    for bad in (b"", b"garbage", cubin[: len(cubin) // 2]):
        path.write_bytes(bad)
        again, again_log = jit.cached_compile(src, "sm_80")
        assert again == cubin and "registers" in again_log and path.read_bytes() == cubin
    assert len(calls) == 4


def test_processes_compiling_one_source_at_once_compile_it_once(tmp_path, nvrtc):
    """Two test workers building the same kernels: each entry is compiled by one process, the other
    waits for it and reads it."""
    import subprocess
    import sys

    log = tmp_path / "compiles.txt"
    code = ("import sys, time\n"
            "from fo_lib.jit import compiler\n"
            "real = compiler.compile_with_log\n"
            "def slow(*a, **k):\n"
            f"    open({str(log)!r}, 'a').write('compiled\\n')\n"
            "    time.sleep(1.0)\n"
            "    return real(*a, **k)\n"
            "compiler.compile_with_log = slow\n"
            "cubin, _ = compiler.cached_compile('extern \"C\" __global__ void k(int* x) { x[0] = 2; }\\n', 'sm_80')\n"
            "print(len(cubin))\n")
    env = dict(os.environ, FO_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    assert outs[0][0] == outs[1][0] and int(outs[0][0]) > 0
    assert log.read_text() == "compiled\n"


def test_parallel_build_reports_a_failing_source_and_builds_the_rest(tmp_path, monkeypatch, nvrtc):
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path))
    good = 'extern "C" __global__ void k(int* x) { x[0] = 1; }\n'
    bad = 'extern "C" __global__ void k() { undefined_symbol_xyz(); }\n'
    done = catalog.build_cases([("good", good, "sm_80"), ("bad", bad, "sm_80"), ("good", good, "sm_86")], jobs=2)
    assert [(label, arch) for label, arch, _, _ in done] == [("good", "sm_80"), ("bad", "sm_80"), ("good", "sm_86")]
    errors = [err for _, _, _, err in done]
    assert errors[0] is None and errors[2] is None and "NVRTC failed" in errors[1]
    assert len(list(tmp_path.glob("*.cubin"))) == 2


def test_compile_error_carries_log(nvrtc):
    with pytest.raises(jit.KernelCompileError, match="undefined_symbol_xyz") as info:
        jit.compile_cubin('extern "C" __global__ void k() { undefined_symbol_xyz(); }', "sm_80")
    assert "sm_80" in str(info.value)


def test_gpu_entry_points_say_what_is_missing():
    try:
        import cupy
        has_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001
        has_gpu = False
    if has_gpu:
        pytest.skip("a GPU is present")
    with pytest.raises(jit.CudaUnavailableError):
        jit.current_arch()


# --- the launch path (CPU: everything that does not touch a GPU) -----------------------------------
def test_launch_memo_builds_once_and_evicts_oldest():
    memo = jit.LaunchMemo(size=2)
    built = []

    def build(tag):
        return lambda: built.append(tag) or tag

    assert memo.get_or_build(("a",), build("a")) == "a"
    assert memo.get_or_build(("a",), build("a-again")) == "a"  # a hit does not rebuild
    memo.get_or_build(("b",), build("b"))
    memo.get_or_build(("c",), build("c"))  # evicts ("a",), the oldest
    assert memo.get(("a",)) is None and memo.get(("b",)) == "b" and memo.get(("c",)) == "c"
    assert built == ["a", "b", "c"]


def test_launch_memo_never_stores_unusable_keys():
    memo = jit.LaunchMemo()
    for key in (None, ({"unhashable": 1},)):
        assert memo.get_or_build(key, lambda: "x") == "x"
        assert memo.get(key) is None
    assert len(memo._launches) == 0


def test_memo_key_follows_every_tensor_property():
    import torch
    a = torch.zeros(4, 8)
    base = jit.memo_key(("plain",), a, None)
    assert base == jit.memo_key(("plain",), a, None)
    # Another address, dtype, shape or stride is another key (its checks and arguments differ).
    for other in (torch.zeros(4, 8), a.double(), a.view(8, 4), a.t(), a[:, :4]):
        assert jit.memo_key(("plain",), other, None) != base
    assert jit.memo_key(("plain",), a, None) != jit.memo_key(("plain",), a, a)
    assert jit.memo_key(("plain",), a, [1, 2]) is None  # not a tensor: no memo, the checks raise


@pytest.mark.parametrize("args,grid,block,match", [
    ((1,), (1,), (1,), "NumPy scalar"),                # a Python int has no exact C size
    ((__import__("numpy").zeros(2),), (1,), (1,), "one-element"),
    ((), (0,), (1,), "grid"), ((), (1,), (1, 1, 1, 1), "block")])
def test_prepared_launch_rejects_bad_arguments_before_any_device_call(args, grid, block, match):
    with pytest.raises((TypeError, ValueError), match=match):
        jit.PreparedLaunch(None, grid, block, args, device_index=0)


@pytest.mark.parametrize("fails", [False, True])
def test_a_graph_capture_collects_first_and_holds_the_collector_off_until_it_ends(monkeypatch, fails):
    """No cycle is freed inside a capture (freeing a graph or event there invalidates it): the
    collector runs before and is off during the capture, and is back on after it, failed or not."""
    import contextlib
    import gc

    import torch

    seen = []
    monkeypatch.setattr(gc, "collect", lambda *a: seen.append(("collect", gc.isenabled())) or 0)

    @contextlib.contextmanager
    def fake_graph(graph, stream=None, capture_error_mode="global"):
        seen.append(("begin", gc.isenabled(), stream, capture_error_mode))
        yield
        seen.append(("end", gc.isenabled()))

    monkeypatch.setattr(torch.cuda, "graph", fake_graph)
    assert gc.isenabled()
    with contextlib.suppress(RuntimeError):
        with jit.capture_graph("g", stream="s", capture_error_mode="relaxed") as g:
            assert g == "g" and not gc.isenabled()
            if fails:
                raise RuntimeError("capture invalidated")
    assert gc.isenabled()
    assert seen == [("collect", True), ("begin", False, "s", "relaxed")] + ([] if fails else [("end", False)])
