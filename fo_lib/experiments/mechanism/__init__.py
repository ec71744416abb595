"""The mechanism walkthrough (notebook 00): the counting table of one plan, step by step.

Everything here is derived from the plan's own tables (:mod:`fo_lib.reorder`) and wave model
(:class:`fo_lib.tiling.TileGrid`), never drawn by hand:

* :func:`counting_trace` replays a call the way the signalling GEMM runs it: tiles finish in
  schedule order (wave by wave, CTA by CTA inside a wave), each bumps its group's counter
  (``tile_group``), a group fires when its counter reaches ``group_tiles[g]``, and its collective
  runs on the slice its tiles were stored into (read off ``row_offset``); a last step gathers the
  tiles back to row-major through ``post_table_for(rank)``.
* :class:`RecordingCommunicator` and :func:`check_against_run` hold the trace against a real
  CPU run of :class:`fo_lib.engine.OverlapPlan`: each collective's slice and the whole send buffer
  after it.
* :func:`draw_step` draws one step on one axes (output tiles, counting table, send buffer).
* :func:`design_comparison` is Table 1 of the paper on a given GEMM: decomposition (k smaller
  GEMMs), fusion (communication per tile inside the GEMM) and signalling, with the wave counts and
  fills of :class:`~fo_lib.tiling.TileGrid`; :func:`draw_designs` draws it.

Modules: :mod:`.trace` (the counting trace), :mod:`.run_check` (the trace against a real run),
:mod:`.drawing` (the steps drawn), :mod:`.designs` (Table 1).
"""
from .designs import decomposed, design_comparison, draw_designs
from .drawing import FRAME_MAX_PX, GROUP_COLORS, draw_step, draw_trace, rendered_size, step_images
from .run_check import RecordingCommunicator, check_against_run, run_recorded
from .trace import MechanismError, Step, Trace, counting_trace, post_reorder, predicted_buffers

__all__ = ["FRAME_MAX_PX", "GROUP_COLORS", "MechanismError", "RecordingCommunicator", "Step", "Trace",
           "check_against_run", "counting_trace", "decomposed", "design_comparison", "draw_designs", "draw_step",
           "draw_trace", "post_reorder", "predicted_buffers", "rendered_size", "run_recorded", "step_images"]
