"""One function per figure: measure on the GPU (``mode="measure"``) or load the recorded data
(``mode="replay"``), and return a DataFrame. ``mode="auto"`` measures when the hardware the
experiment needs is present, else replays ``data/<data_set>/``. Notebooks call these and plot.
"""
from __future__ import annotations

from .common import (MODES, PRIMITIVE_TITLES, gpu_name, have_gpu, load, measured_set, notebook_setup,  # noqa: F401
                     other_gpus, other_records, record, resolve_mode, save, stamp, zoom_speedups)

from . import (ablation, e2e_layer, explorer, figure_checks, heatmap, kernel_bench, mechanism, multi_gpu,  # noqa: E402,F401
               overheads, overlap, prediction_error, recorded, timeline, wave_pattern)  # the experiment modules
