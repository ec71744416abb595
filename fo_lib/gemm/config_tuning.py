"""A GEMM config chosen by timing a few candidates on the shape itself, remembered on disk: the first
plain call of a shape times the tile table's best few configs and every later call (in any process
on this GPU) reads the winner, in the spirit of Triton's autotuner. (The offline measurements that
feed the overlap predictor's partition search are :mod:`fo_lib.partition_tuning`.)

The tile table's model (:mod:`fo_lib.gemm.tile_table`) ranks every config from full-wave times
recorded on other grids; on the shape itself its predictions miss by a few percent either way (the
clock follows how long a GEMM runs, the L2 follows the operand sizes), which is as much as the
candidates differ. So the model proposes (:func:`shortlist`) and the GPU decides (:func:`time_launches`):

* Candidates: the best-ranked config of each (tile, stream-K) pair, the first :data:`TOP` of them,
  plus the model's pick, the table-free guess and the best 128- or 256-wide tile if they are not
  among those; on a grid of one wave each of those in a few rasters too
  (``fo_lib.gemm.sm90.config_tuning.tuning_candidates``).
* Timing: as the LLM benchmark times a GEMM against cuBLAS (``fo_lib.experiments.gemm_llm``), with
  the same code (:func:`fo_lib.testing.bench_interleaved`): per candidate a CUDA graph of
  :data:`REPS` back-to-back calls, each on the next operand set (the caller's operands, then
  copies: :func:`rotation_sets`, at most one per call), replayed between two CUDA events once per
  round, :data:`ROUNDS` rounds in a shuffled order, the median per candidate; on a grid of one wave
  after :data:`SETTLE_S` of idle (clocks held down by earlier work go back up). (Timed otherwise,
  each call alone after an L2 flush or back to back without a graph, the candidates ranked
  differently and the pick lost in the benchmark: docs/decisions.md, "Autotuning times the shortlist
  as the LLM benchmark times".) The model's pick stays unless another is faster by more than
  :data:`WIN` (noise).
* Cache: ``sm90_autotune.json`` in the kernel cache folder (:func:`fo_lib.jit.compiler.cache_dir`),
  keyed by GPU name, CTA count, ``M x N x K``, dtype and a digest of the candidates' kernel cache
  keys and of how they are timed (a changed source, header, NVRTC option or version, or timing,
  tunes again); read, merged and replaced atomically under a file lock (``filelock``, the lock file
  in the temporary folder: :func:`lock_path`), so concurrent tuners on one machine lose no entry. A
  file that is not a JSON object of tunings (not JSON, another shape, nested deeper than
  :data:`MAX_DEPTH`) is read as empty, warns once per process and is rewritten whole at the next
  tuning; ``python -m fo_lib gemm-tunings`` lists it as unreadable and ``--clear`` deletes it.
  ``FO_SM90_AUTOTUNE_FILE`` names another file (an experiment that must tune afresh without losing
  the kernels already compiled).

``FO_SM90_AUTOTUNE=0`` turns it off (the model's pick). Nothing is timed for an explicit CTA count
other than the SM count or without a tile table (the model's pick), nor inside a CUDA-graph capture
on the current stream (a shape tuned before runs its winner there, one not yet tuned the model's
pick). Tuning synchronizes the device and captures CUDA graphs of its own (on a side stream, in
the thread-local capture mode; each capture empties torch's cached blocks as ``torch.cuda.graph``
does): a capture in progress on another stream (another thread's, or a ``stream=`` being captured)
would be broken by it, so tune a shape eagerly before capturing it there. The graphs replay on the
current stream. The operand copies cost up to ``REPS - 1`` times A and B plus ``REPS`` outputs while a
shape tunes; a tuning that fails (out of memory) runs the model's pick and is not retried in the
process.
Pure Python apart from :func:`time_launches` (torch, at call time).
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock

from .._util import atomic_write, user_lock_path

ENV_VAR = "FO_SM90_AUTOTUNE"
FILE_NAME = "sm90_autotune.json"
FILE_ENV = "FO_SM90_AUTOTUNE_FILE"
TOP = 4
# NOTES: a timing's first rounds run at clocks the power limiter has not yet pulled down, and there
# the candidates can rank otherwise than in the steady state that the benchmark and a model's stream
# of GEMMs see (the median of 10 rounds picked by the boost, of 30 by the steady state: docs/decisions.md,
# "Autotuning takes the median of 30 rounds").
ROUNDS = 30
REPS = 3  # calls per candidate and round, back to back
# NOTES: after a few seconds of heavy GEMMs an H200 sits at its power cap (throttle reason SW power
# cap, SM clock ~1500 MHz against 1980) for a while after the load ends, and every candidate of a
# one-wave grid then timed alike (within 3 %, where the clusters run 8 % ahead with the clocks free):
# tuning kept the model's pick. The clocks were back by the next timing, under a second later. On
# grids of more waves the idle did not help (LLM shapes, tuning with and without it in alternating
# processes: 0.997 with it; docs/decisions.md, "One-wave grids are tuned in four rasters after a 0.2 s
# idle"): their own load sets the clocks the benchmark sees.
SETTLE_S = 0.2  # idle before a one-wave grid's timed rounds
# NOTES: on a one-wave grid these rounds time single-CTA configs within a hair of the cluster ones,
# either way; the LLM benchmark's rounds (cuBLAS and other GEMMs among them) time a cluster pick's
# single-CTA twin behind it in nearly every process (docs/decisions.md, "On one wave a single CTA must
# beat a cluster by 3 %"). There a single CTA wins only where faster by more than this share
# (fo_lib.gemm.sm90.config_tuning.tuning_handicap).
ONE_WAVE_SINGLE_CTA = 0.03
# What time_launches measures, in the cache digest: tunings timed another way tune again.
TIMING = (f"bench_interleaved graph replays of {REPS} back-to-back calls on rotating operand copies, {ROUNDS} rounds"
          f" after {SETTLE_S} s idle on one wave")
# NOTES: medians of 30 rounds repeat to a few tenths of a percent on an H200; a smaller win is noise
# and would make the pick flip between runs.
WIN = 0.005

# The file nests three objects deep (key, entry, config or times); one nested much deeper is not
# this module's, and rewriting it (json.dumps recurses) would overflow the stack.
MAX_DEPTH = 16
# A writer holds the lock for one read and one rewrite of a small file (milliseconds), so a holder
# stuck this long is hung and its waiter keeps the tuning in memory only rather than hang too.
LOCK_TIMEOUT_S = 60.0

_lock = threading.Lock()
_memory: dict | None = None  # the file's entries, read once per process
_failed: set = set()  # keys whose tuning failed in this process: not tried again on every call
_warned: set = set()  # unreadable files already warned about in this process


def enabled() -> bool:
    return os.environ.get(ENV_VAR, "1").strip().lower() not in ("0", "off", "false", "no")


def digest(parts) -> str:
    """A short digest of ``parts`` (strings, order kept): of the candidates' kernel cache keys
    (:func:`fo_lib.jit.compiler.source_key`: source, headers, NVRTC options and version), so a
    tuning of another kernel, option set or config set does not apply."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def key(gpu: str, ctas: int, M: int, N: int, K: int, dtype: str, kernels: str) -> str:
    """The cache key of one shape on one GPU (``kernels``: the candidates' :func:`digest`)."""
    return f"{gpu}|{ctas}|{M}x{N}x{K}|{dtype}|{kernels}"


def cache_path() -> Path:
    if os.environ.get(FILE_ENV):
        return Path(os.environ[FILE_ENV])
    from ..jit.compiler import cache_dir
    return Path(cache_dir()) / FILE_NAME


def lock_path() -> Path:
    """The lock file that writers of every cache file hold, one per user in the temporary folder: one
    beside the cache file would stay in the cache folder (filelock may keep it on release), and a
    write takes milliseconds, so writers of cache files in other folders lose nothing waiting on it."""
    return user_lock_path(Path(FILE_NAME).stem)


def _file_lock() -> FileLock:
    return FileLock(lock_path(), timeout=LOCK_TIMEOUT_S)


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
               type(None): "null"}


def _too_deep(doc) -> bool:
    """Whether ``doc``'s objects and arrays nest deeper than :data:`MAX_DEPTH` (walked without recursion)."""
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > MAX_DEPTH:
                return True
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return False


def read_file(path: Path | None = None) -> tuple[dict, str | None]:
    """``(entries, problem)`` of the cache file (default :func:`cache_path`): ``problem`` is None for a
    readable or missing file, else what is wrong with it in a few words (the entries then empty).
    Never raises for the file's content."""
    path = cache_path() if path is None else Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"cannot be read: {exc.strerror or exc}"
    try:
        data = json.loads(raw)
    except RecursionError:  # the decoder recurses once per nesting level
        return {}, "nested too deeply"
    except ValueError as exc:  # bad JSON or UTF-8, a number too long
        return {}, "not valid JSON: " + " ".join(str(exc).split())
    if not isinstance(data, dict):
        return {}, f"{_JSON_KINDS.get(type(data), type(data).__name__)} where an object of tunings belongs"
    if _too_deep(data):
        return {}, f"nested deeper than {MAX_DEPTH} levels"
    return data, None


def _read(path: Path) -> dict:
    """The entries of ``path``; an unreadable file warns, once per process and file."""
    entries, problem = read_file(path)
    if problem is not None and str(path) not in _warned:
        _warned.add(str(path))
        warnings.warn(f"fo_lib.gemm: the autotuning cache {path} is unreadable ({problem}); it is ignored "
                      "and rewritten at the next tuning", RuntimeWarning, stacklevel=3)
    return entries


def _entries() -> dict:
    global _memory
    entries = _memory
    if entries is None:
        try:
            entries = _read(cache_path())
        except OSError:  # no cache folder to be had: nothing remembered
            entries = {}
        _memory = entries
    return entries


def forget() -> None:
    """Drop this process's copy of the cache (the next lookup reads the file again) and its list of
    failed tunings."""
    global _memory
    with _lock:
        _memory = None
        _failed.clear()


def failed(k: str) -> bool:
    """Whether tuning under ``k`` failed in this process (:func:`mark_failed`)."""
    return k in _failed


def mark_failed(k: str) -> None:
    _failed.add(k)


def on_disk() -> dict:
    """Every entry of the cache file as ``{key: entry}`` (empty where there is none or it is unreadable:
    :func:`read_file` tells why)."""
    return read_file()[0]


def clear() -> int:
    """Delete the cache file whatever it holds (and this process's copy); returns how many entries it
    held (0 for an unreadable file)."""
    path = cache_path()
    try:
        lock = _file_lock()
        lock.acquire()
    except OSError:  # a hung writer or no temporary folder: delete all the same
        lock = None
    try:
        n = len(read_file(path)[0])
        path.unlink(missing_ok=True)
    finally:
        if lock is not None:
            lock.release()
    forget()
    return n


def parse_key(k: str) -> dict:
    """``{gpu, ctas, M, N, K, dtype, digest}`` of a key made by :func:`key` (ValueError otherwise)."""
    gpu, ctas, shape, dtype, digest = k.split("|")
    M, N, K = (int(v) for v in shape.split("x"))
    return dict(gpu=gpu, ctas=int(ctas), M=M, N=N, K=K, dtype=dtype, digest=digest)


def _config_of(entry, make_config):
    """The config an entry holds (built by ``make_config(**fields)``), or None where it no longer
    makes a valid one (another version of the config)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
        return None
    try:
        return make_config(**entry["config"]).validate()
    except Exception:  # noqa: BLE001 - an entry of another version of the config: tune again
        return None


def lookup(k: str, make_config):
    """The remembered config under key ``k``, or None: also for an entry that no longer makes a
    valid config."""
    return _config_of(_entries().get(k), make_config)


def remembered(make_config) -> list:
    """Every entry of the cache file, by key: ``(key, parse_key(key) or None, config or None, entry)``
    (None where the key or the config is of another version)."""
    out = []
    for k, entry in sorted(on_disk().items()):
        try:
            where = parse_key(k)
        except ValueError:
            where = None
        out.append((k, where, _config_of(entry, make_config), entry))
    return out


def remember(k: str, config, timed_ms: dict, model_label: str) -> None:
    """Store ``config`` under ``k`` (with the candidates' times), merged into the file on disk."""
    entry = dict(config=asdict(config), ms={lbl: round(v, 5) for lbl, v in timed_ms.items()}, model=model_label,
                 date=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    with _lock:
        _entries()[k] = entry
        try:
            path = cache_path()
            # Another process's read-merge-write between this one's read and rename would be lost.
            with _file_lock():
                merged = _read(path)  # an unreadable file is replaced by this entry alone
                merged[k] = entry
                atomic_write(path, json.dumps(merged, indent=1, sort_keys=True).encode())
        except OSError:  # a read-only cache folder or a lock not to be had: this process still remembers
            pass


def shortlist(ranked: list, model, also=(), family_widths=(128, 256), top: int = TOP) -> list:
    """The configs to time, from the model's ranking ``[(score, config), ...]`` (best first): the
    best of each (tile, stream-K) pair, the first ``top``, then ``model`` (the model's pick), the
    configs in ``also`` and the best-ranked config of a tile in ``family_widths``, where missing."""
    best_of: dict = {}
    for _, c in ranked:
        best_of.setdefault((c.tile_name, c.stream_k), c)
    out = list(best_of.values())[:top]
    for c in (model, *also):
        if c not in out:
            out.append(c)
    if not any(c.BN in family_widths for c in out):
        extra = next((c for c in best_of.values() if c.BN in family_widths), None)
        if extra is not None:
            out.append(extra)
    return out


def choose(timed_ms: dict, model_label: str, handicap=None) -> str:
    """The label of the fastest candidate; the model's pick unless beaten by more than :data:`WIN`.
    ``handicap``: ``{label: factor}`` that multiplies a candidate's time before the comparison (a
    kind of config known to rank lower in use than in these rounds)."""
    scaled = {k: v * (handicap or {}).get(k, 1.0) for k, v in timed_ms.items()}
    fastest = min(scaled, key=scaled.get)
    if scaled[fastest] < scaled[model_label] * (1 - WIN):
        return fastest
    return model_label


def rotation_sets(set_bytes: int, l2_bytes: int) -> int:
    """How many operand sets of ``set_bytes`` (A, B and C) rotating calls go through so that no call
    finds its operands in an L2 of ``l2_bytes``: three L2s' worth, at least 2, at most 16."""
    return max(2, min(16, -(-3 * l2_bytes // set_bytes)))


def time_launches(runs: dict, rounds: int = ROUNDS, seed: int = 0, reps: int = REPS, settle_s: float = 0.0) -> dict:
    """Median device ms per call of each ``runs[label](i)`` (a launch on the current stream, capturable;
    ``i`` counts the calls, for rotating operand sets): ``reps`` calls per CUDA graph, one replay per
    round, the rounds' orders shuffled, after ``settle_s`` of idle."""
    from ..testing import bench_interleaved, summarize
    return summarize(bench_interleaved(runs, rounds=rounds, inner=reps, warmup=1, graph=True, order="shuffle",
                                       seed=seed, capture_error_mode="thread_local", settle_s=settle_s))
