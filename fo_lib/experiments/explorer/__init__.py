"""The partition explorer (notebook 09): the design space of Fig. 9, the group-wise counting of
Fig. 6 and the predictor of Alg. 1, for a GEMM shape, a tile config and a link chosen by hand.

Everything here is a plain function of its inputs, so the notebook's widgets only call
:func:`explore` and :func:`draw` and tests reach every line:

* :func:`explore` computes the tile -> wave map (:class:`~fo_lib.tiling.TileGrid`), a
  :class:`~fo_lib.profiles.GemmProfile` (recorded when a data set has this exact GEMM, tile, raster
  and CTA count; else *modelled*, see :func:`modelled_profile`), the predicted timeline of the chosen
  partition beside the finest and no overlap (:mod:`fo_lib.predictor`), the best partition and its
  predicted speedup, and for ``T <= DESIGN_SPACE_MAX_WAVES`` every partition's predicted time;
* :func:`draw` draws one figure of it (tile map, timelines, design space);
* :class:`Measurer` (:mod:`.measure`) runs the shown view on a CUDA GPU, the GEMM's stamped tile
  finish times and one overlapped call on the emulated link, reusing what a shape built;
  :func:`draw_measured` draws that over the model's waves and predicted timeline;
* :mod:`.space` measures every partition of one shape's waves against the model (a GPU), and draws it;
* :func:`widget` wires ipywidgets controls to all of these (imported only there).

Link presets (:func:`presets`): every measured curve under ``data/`` (2 H200s over NVLink with NCCL's
kernels at each recorded CTA budget and with its copy engines, the emulated link of one H200 and of one H100), and two
*modelled* links (latency + bandwidth, :data:`MODELLED_LINKS`) for boxes we have not measured.
Bad input raises one :class:`ExplorerError` (a ``ValueError``) whose message names the field.
"""
from .compute import (Explored, design_space, design_table, explore, modelled_profile, recorded_profile,  # noqa: F401
                      tile_tflops)
from .draw import draw, new_figure, redraw, render_png  # noqa: F401
from .draw_measured import draw_measured, new_measured_figure  # noqa: F401
from .errors import (DESIGN_SPACE_MAX_WAVES, ELEM_BYTES, MAX_DIM, PARTITION_CHOICES, TILE_CONFIGS,  # noqa: F401
                     ExplorerError)
from .inputs import ExplorerInput, parse_dim, parse_partition, resolve  # noqa: F401
from .links import DEFAULT_LINK, MODELLED_LABELS, MODELLED_LINKS, GpuSpec, LinkPreset, ModelledLink, presets  # noqa: F401
from .measure import Device, Measured, Measurer, default_measurer, measure_problem  # noqa: F401
from .widget import widget  # noqa: F401
