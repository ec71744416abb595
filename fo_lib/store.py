"""Where this GPU's offline results are: one lookup for every table and curve the library reads.

In order: the user's calibration (``python -m fo_lib calibrate`` writes
``<cache>/calibration/<gpu>/<name>``, where ``<cache>`` is ``$FO_CACHE_DIR``, else
``$XDG_CACHE_HOME/fo_lib``, else ``~/.cache/fo_lib``), then the record shipped in the repository
(``data/<gpu>/<name>``), then nothing: the caller falls back to its table-free model, and the first
such fallback per (record, GPU) in a process prints one warning that names the command to run.

Pure (the standard library): the GPU's folder name comes from the caller or from
:func:`fo_lib.provenance.gpu_tag` of a name.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from . import provenance
from ._util import user_cache

CALIBRATE = "python -m fo_lib calibrate"
# What calibrate records, by file name (each with its provenance sidecar where it is a CSV).
TILES = "gemm_sm90_tiles.csv"            # the Hopper GEMM's tile table (fo_lib.gemm.tile_table)
OVERLAP = "overlap_loopback.csv"         # an overlap sweep on the emulated link: summary ...
CANDIDATES = "overlap_loopback_candidates.csv"   # ... every measured partition ...
PROFILES = "overlap_loopback_profiles.json"      # ... and the GEMM profiles + link curves it used
MODEL = "overlap_calibration.csv"        # the refined model's constants fitted on those partitions
# NCCL, in the folder of the GPUs together (``<gpu>x<world>``, e.g. h200x2): latency curves per
# primitive and NCCL CTA budget, and the constants fitted on an NCCL sweep.
NCCL_CURVES = "nccl_curves.csv"
NCCL_MODEL = "overlap_nccl_calibration.csv"

_warned: set = set()


def calibration_dir(gpu: str) -> Path:
    """Where ``calibrate`` writes ``gpu``'s results (``gpu``: a folder name such as 'h100')."""
    return user_cache() / "calibration" / _check_tag(gpu)


def record_dir(gpu: str) -> Path:
    """The repository's records of ``gpu``."""
    return Path(provenance.DATA_DIR) / _check_tag(gpu)


def _check_tag(gpu: str) -> str:
    if not isinstance(gpu, str) or not gpu or "/" in gpu or gpu.startswith("."):
        raise ValueError(f"a GPU folder name such as 'h100' expected, got {gpu!r}")
    return gpu


@dataclass(frozen=True)
class Found:
    """A stored result: its ``path`` and whose it is (``"calibration"`` or ``"record"``)."""
    path: Path
    source: str


def find(name: str, gpu: str | None, *, what: str | None = None, warn: bool = True) -> Found | None:
    """``gpu``'s ``name``: the user's calibration, else the repository's record, else None (with
    one warning per (name, GPU) and process, where ``warn``, naming ``what`` it is). ``gpu`` None
    (no GPU): None, silently (there is nothing to calibrate)."""
    if gpu is None:
        return None
    for source, folder in (("calibration", calibration_dir(gpu)), ("record", record_dir(gpu))):
        path = folder / name
        if path.is_file():
            return Found(path, source)
    if warn and (name, gpu) not in _warned:
        _warned.add((name, gpu))
        warnings.warn(f"fo_lib: no {what or name} for this GPU ({gpu}) in {calibration_dir(gpu)} or "
                      f"{record_dir(gpu)}: using the table-free model; run `{CALIBRATE}` once to measure it",
                      RuntimeWarning, stacklevel=3)
    return None


def forget_warnings() -> None:
    """Warn again (tests; a process that has just calibrated)."""
    _warned.clear()


def model_params(gpu: str | None, name: str = MODEL) -> dict | None:
    """``{primitive: {launch_ms, comm_slowdown, gemm_slowdown, contention}}`` fitted for ``gpu`` on
    the emulated link (the ``model`` part of calibrate, or the record shipped for it; ``name``
    :data:`NCCL_MODEL` and ``gpu`` a ``<gpu>x<world>`` folder: fitted on NCCL), or None: the defaults."""
    import json

    from .profiles import ProfileError

    found = find(name, gpu, what="fitted overlap model", warn=name == MODEL)
    if found is None:
        return None
    sidecar = found.path.with_name(Path(name).stem + ".meta.json")
    try:
        fitted = json.loads(sidecar.read_text()).get("fitted_on_all_shapes")
    except (OSError, ValueError, AttributeError):
        fitted = None
    if not isinstance(fitted, dict):
        raise ProfileError(f"{sidecar}: no fitted_on_all_shapes (re-run `{CALIBRATE} --force`)")
    return fitted
