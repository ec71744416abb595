"""What the figure modules measured on one GPU since Fig. 13 share (:mod:`.heatmap`,
:mod:`.ablation`): a recorded data set that may not exist yet, the figure that says so, and the
refined model's calibrated parameters their measurements tune with."""
from __future__ import annotations

from .common import load

NO_DATA = "no recorded data yet: run mode='measure' on a GPU"


def model_params(spec: str = "auto") -> dict | None:
    """``{primitive: {launch_ms, comm_slowdown, gemm_slowdown, contention}}`` for the tuner:
    ``"auto"`` this GPU's (:func:`fo_lib.store.model_params`: ``python -m fo_lib
    calibrate``'s fit, else the one recorded in ``data/<gpu>/overlap_calibration.csv``, else the
    defaults), ``"none"`` the defaults, else a JSON file (a calibration sidecar or the mapping)."""
    from .overlap_measure import load_model_params

    if spec == "auto":
        from .. import store
        from ..gemm.tile_table import current_gpu_tag
        return store.model_params(current_gpu_tag())
    return None if spec == "none" else load_model_params(spec, spec)


def load_or_none(data_set: str, name: str):
    """``(df, meta)`` of ``data/<data_set>/<name>.csv``, or ``(None, {})`` with a printed message
    when nothing was recorded yet (a replay on a CPU then still draws :func:`no_data_figure`)."""
    try:
        return load(data_set, name)
    except FileNotFoundError as exc:
        print(f"{exc}\n-> {NO_DATA} (e.g. scripts/record/record_figures.py --only {name})")
        return None, {}


def no_data_figure(title: str, hint: str = ""):
    """A figure that says there is nothing recorded to draw (not an empty plot that looks like data)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 2.6))
    ax.axis("off")
    ax.text(0.5, 0.62, title, ha="center", va="center", fontsize=11, weight="bold")
    ax.text(0.5, 0.38, NO_DATA + (f"\n{hint}" if hint else ""), ha="center", va="center", fontsize=9, color="0.3")
    return fig
