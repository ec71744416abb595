"""The autotuning cache file (fo_lib.gemm.config_tuning) under damage and concurrency: a file that is
not a JSON object of tunings warns once, reads as empty and is rewritten whole; clear() (what
``gemm-tunings --clear`` runs) deletes it whatever it holds; processes tuning at once lose no entry
(a file lock around the read-merge-write)."""
import json
import multiprocessing
import warnings

import pytest

from fo_lib.gemm import config_tuning, sm90

CFG = sm90.CONFIGS["128x256x64"].with_raster("row", 8)
DEEP_ENTRY = json.dumps({"k": {"config": json.loads("[" * 40 + "]" * 40)}})
# What a damaged or hand-edited file may hold, and a word of the problem each one is reported as.
CORRUPT = {
    "bad json": ("{not json", "not valid JSON"),
    "bad utf-8": (b'{"k\xff": 1}', "not valid JSON"),
    "an array": ("[1, 2]", "an array where an object"),
    "a number": ("7", "a number where an object"),
    "too deep to parse": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "too deep to rewrite": (DEEP_ENTRY, "nested deeper than"),
}


def _write(path, content):
    path.write_bytes(content if isinstance(content, bytes) else content.encode())


def _key(i: int) -> str:
    return config_tuning.key("NVIDIA H200", 132, 128 * (i + 1), 4096, 4096, "bf16", "configs")


@pytest.mark.parametrize("name", CORRUPT)
def test_a_corrupt_file_warns_once_reads_as_empty_and_is_rewritten(tuning_cache, name):
    content, problem = CORRUPT[name]
    _write(tuning_cache, content)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert config_tuning.lookup(_key(0), sm90.Sm90Config) is None
        config_tuning.forget()  # the file is read again: no second warning in this process
        assert config_tuning.lookup(_key(0), sm90.Sm90Config) is None
        assert config_tuning.on_disk() == {}
        config_tuning.remember(_key(1), CFG, {"a": 1.0}, "a")
    lines = [str(w.message) for w in seen]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert str(tuning_cache) in lines[0] and problem in lines[0] and "rewritten" in lines[0]
    assert issubclass(seen[0].category, RuntimeWarning)
    assert list(json.loads(tuning_cache.read_text())) == [_key(1)]  # rewritten whole, readable again
    config_tuning.forget()
    assert config_tuning.lookup(_key(1), sm90.Sm90Config) == CFG


@pytest.mark.parametrize("name", CORRUPT)
def test_read_file_says_what_is_wrong_in_one_line(tuning_cache, name):
    content, problem = CORRUPT[name]
    _write(tuning_cache, content)
    entries, why = config_tuning.read_file(tuning_cache)
    assert entries == {} and problem in why and "\n" not in why


def test_a_readable_or_missing_file_has_no_problem(tuning_cache):
    assert config_tuning.read_file(tuning_cache) == ({}, None)
    config_tuning.remember(_key(0), CFG, {"a": 1.0}, "a")
    entries, problem = config_tuning.read_file(tuning_cache)
    assert problem is None and list(entries) == [_key(0)]


@pytest.mark.parametrize("name", CORRUPT)
def test_clear_deletes_the_file_whatever_it_holds(tuning_cache, name):
    _write(tuning_cache, CORRUPT[name][0])
    assert config_tuning.clear() == 0
    assert not tuning_cache.exists()
    assert config_tuning.clear() == 0  # nothing there: nothing to do


def test_clear_counts_and_deletes_a_readable_file(tuning_cache):
    for i in range(3):
        config_tuning.remember(_key(i), CFG, {"a": 1.0}, "a")
    assert config_tuning.clear() == 3 and not tuning_cache.exists()
    assert config_tuning.lookup(_key(0), sm90.Sm90Config) is None


def _tune_many(path: str, worker: int, count: int, start) -> None:
    """One tuning process: ``count`` entries of its own into the cache file ``path``, once every
    worker is ready (the processes start at different times)."""
    import os
    os.environ[config_tuning.FILE_ENV] = path
    config_tuning.forget()
    start.wait()
    for i in range(count):
        k = config_tuning.key("NVIDIA H200", 132, worker, i, 4096, "bf16", "configs")
        config_tuning.remember(k, CFG, {"a": 1.0 + i}, "a")


@pytest.mark.timeout(120)
def test_processes_tuning_at_once_lose_no_entry(tmp_path):
    workers, count = 4, 50
    path = tmp_path / "tunings.json"
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(workers)
    procs = [ctx.Process(target=_tune_many, args=(str(path), w, count, start)) for w in range(workers)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(100)
    finally:
        for p in procs:  # a hung worker must not outlive the test
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0] * workers
    entries = json.loads(path.read_text())
    want = {config_tuning.key("NVIDIA H200", 132, w, i, 4096, "bf16", "configs")
            for w in range(workers) for i in range(count)}
    assert len(want - set(entries)) == 0, f"lost {len(want - set(entries))} of {len(want)} entries"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp.json")]  # no leftover temporary
