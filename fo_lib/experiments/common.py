"""What every figure's experiment shares: the measure/replay modes, recorded data sets, figure stamps
and files. Re-exported by :mod:`fo_lib.experiments`."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from ..provenance import DATA_DIR

MODES = ("auto", "measure", "replay")
# How figures name the collectives (the data's column values are the Python identifiers).
PRIMITIVE_TITLES = {"all_reduce": "AllReduce", "reduce_scatter": "ReduceScatter", "all_to_all": "All-to-All"}


def notebook_setup(quick, figures_dir=None) -> Path:
    """What every notebook's first code cell does after its parameters: refuse a ``quick`` that is
    not a bool (papermill's ``-p quick false`` injects the truthy string "false"), widen pandas'
    printed tables, and return where figures go (default ``<repo>/figures``)."""
    from ..provenance import REPO_ROOT

    if not isinstance(quick, bool):
        raise TypeError(f"quick must be True or False, not {quick!r}")
    pd.set_option("display.width", 160)
    _inline_png_without_version()
    return Path(figures_dir) if figures_dir else REPO_ROOT / "figures"


def _inline_png_without_version() -> None:
    """Inline figures as PNG without matplotlib's version in them, like the saved ones: the committed
    notebooks carry these images, and a replay on the same data then gives the same bytes."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.run_line_magic("config", "InlineBackend.print_figure_kwargs = "
                                       "{'bbox_inches': 'tight', 'metadata': {'Software': None}}")


def have_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def resolve_mode(mode: str, needs_gpu: bool = True, *, available=None, need: str = "a CUDA GPU") -> str:
    """``"measure"`` or ``"replay"``: "auto" measures where this machine can (``available()``, by
    default a GPU unless ``not needs_gpu``); an explicit "measure" it cannot do is refused, naming
    what it ``need``s."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "replay":
        return mode
    can = available() if available is not None else (not needs_gpu or have_gpu())
    if mode == "auto":
        return "measure" if can else "replay"
    if not can:
        raise RuntimeError(f"mode='measure' needs {need}; use mode='replay' to load recorded data")
    return mode


def load(data_set: str, name: str) -> tuple[pd.DataFrame, dict]:
    """Recorded ``data/<data_set>/<name>.csv`` and its provenance sidecar."""
    path = DATA_DIR / data_set / f"{name}.csv"
    if not path.exists():
        raise FileNotFoundError(f"no recorded data {path}; run the experiment in measure mode on a GPU first")
    meta_path = path.with_suffix(".meta.json")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    return pd.read_csv(path), meta


def other_gpus(name: str, shown: dict) -> list[str]:
    """The full one-GPU data sets (``data/h100``; not ``data/h200x2`` nor the ``-quick`` sets) that hold
    ``<name>.csv`` recorded on another GPU than ``shown`` (a record's provenance), one per GPU (the
    first by folder name): what a figure whose numbers depend on the GPU draws beside its own data,
    quick run or not. None where ``shown`` names no GPU."""
    import re
    if not shown.get("gpu"):
        return []
    found: dict[str, str] = {}
    for folder in sorted(DATA_DIR.iterdir() if DATA_DIR.is_dir() else []):
        if folder.name.endswith("-quick") or re.search(r"x\d+$", folder.name):
            continue
        meta_path = folder / f"{name}.meta.json"
        if not ((folder / f"{name}.csv").is_file() and meta_path.is_file()):
            continue
        gpu = json.loads(meta_path.read_text()).get("gpu")
        if gpu and gpu != shown["gpu"]:
            found.setdefault(gpu, folder.name)
    return list(found.values())


def other_records(name: str, shown: dict) -> list[tuple[pd.DataFrame, dict]]:
    """``(df, meta)`` of ``<name>`` from each data set :func:`other_gpus` finds: what a figure draws
    beside its own record."""
    return [load(ds, name) for ds in other_gpus(name, shown)]


def gpu_name(meta: dict) -> str:
    """A record's GPU as a legend names it (``H100 80GB HBM3``, not ``NVIDIA H100 80GB HBM3``)."""
    return str(meta.get("gpu", "?")).replace("NVIDIA ", "")


def stamp(fig, meta: dict, extra: str = "") -> None:
    """Stamp a figure with the GPU, the link and the date of its data."""
    gpu = meta.get("gpu", "?")
    link = meta.get("link", "none")
    date = str(meta.get("date", "?"))[:10]
    text = f"{gpu} | link: {link} | data: {date}" + (f" | {extra}" if extra else "")
    fig.text(0.5, 1.0, text, ha="center", va="bottom", fontsize=7, color="0.35")


def zoom_speedups(ax, values, step: float = 0.1) -> None:
    """Bars of speedups that differ by a few percent: the y axis from a multiple of ``step`` under
    the smallest value (0 at least) to just above the largest or 1, with ticks every ``step`` and a
    grid at half steps, instead of 0..max where the differences vanish."""
    import numpy as np
    from matplotlib.ticker import MultipleLocator

    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    lo = max(0.0, np.floor((v.min() - step / 5) / step) * step)
    ax.set_ylim(lo, max(1.0, v.max()) + step / 3)
    ax.yaxis.set_major_locator(MultipleLocator(step))
    ax.yaxis.set_minor_locator(MultipleLocator(step / 2))
    ax.yaxis.grid(True, which="both", lw=0.4, color="0.85")
    ax.set_axisbelow(True)


def measured_set(quick: bool = False, world: int | None = None) -> str:
    """The data set a measurement on this machine writes: ``h200``, ``h200x2`` for ``world=2``, with
    ``-quick`` for the small sweeps of ``run_all.sh --quick`` (so they never replace a full record)."""
    from ..provenance import gpu_tag
    return gpu_tag() + (f"x{world}" if world else "") + ("-quick" if quick else "")


def check_record_folder(folder: str | Path, quick: bool) -> None:
    """Refuse a quick record outside a ``*-quick`` folder and a full one inside it: a notebook replays
    ``data/<data_set>/`` as what its name says, so a small grid in a full folder would pass for the
    paper's figure."""
    name = Path(folder).resolve().name
    if bool(quick) != name.endswith("-quick"):
        raise ValueError(f"a {'quick' if quick else 'full'} record belongs in a folder "
                         f"{'named' if quick else 'not named'} *-quick, not {folder}")


def record(df: pd.DataFrame, name: str, data_set: str | None = None, **meta) -> Path:
    """Write a measured DataFrame to ``data/<gpu>/<name>.csv`` with its provenance sidecar."""
    from ..provenance import gpu_tag, write_result
    return write_result(df, DATA_DIR / (data_set or gpu_tag()) / f"{name}.csv", **meta)


# The keys matplotlib fills in by default that change with the day or the installed version; None
# leaves them out of the file.
PNG_METADATA = {"Software": None}
SVG_METADATA = {"Date": None, "Creator": None}


class Saved(list):
    """The paths :func:`save` wrote; shown by file name only (a notebook's output reads the same on
    every machine, which the committed outputs rely on)."""

    def __repr__(self) -> str:
        return "saved " + ", ".join(p.name for p in self)


def save(fig, name: str, figures_dir: str | Path = "figures") -> list[Path]:
    """Write ``<name>.png`` and ``<name>.svg``; return the paths. With ``FO_FIGURE_CHECKS=1`` the
    figure is then checked (:func:`fo_lib.experiments.figure_checks.check`) and a defect raises, writing
    nothing. (Checked after drawing the files: the check's own draw would change the SVG's clip ids,
    and a checked replay must write the bytes an unchecked one does.)"""
    out = Path(figures_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = Saved([out / f"{name}.png", out / f"{name}.svg"])
    import matplotlib

    # Same data -> same bytes (no dates, no matplotlib version, fixed SVG ids): regenerated figures
    # only differ in git when the data did.
    matplotlib.rcParams["svg.hashsalt"] = "fo_lib"
    from .._util import atomic_path
    # Both written, then checked, then renamed into place: an interrupted run leaves the old figures,
    # not half a new one, and a figure with a defect replaces nothing.
    with atomic_path(paths[1]) as svg, atomic_path(paths[0]) as png:  # the PNG renamed first
        tmp = {"png": png, "svg": svg}
        fig.savefig(tmp["png"], dpi=150, bbox_inches="tight", metadata=PNG_METADATA)
        fig.savefig(tmp["svg"], bbox_inches="tight", metadata=SVG_METADATA)
        if os.environ.get("FO_FIGURE_CHECKS") == "1":
            from .figure_checks import check
            check(fig)
    return paths
