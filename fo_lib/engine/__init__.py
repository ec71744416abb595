"""The overlapped op: one signaled GEMM, a collective per wave group behind a counter wait, and a
post-reorder fused with element-wise work.

* :mod:`.plan`: :class:`OverlapPlan`, built once per (primitive, shape, dtype, world, link,
  partition): validates, chooses the config, grid and partition, and delegates.
* :mod:`.layouts`: one buffer layout per primitive (tables, group slices, the collective, the
  post-reorder's table).
* :mod:`.cuda_executor` (streams, counter waits, captured communication graphs, whole-call graphs,
  the measured timeline) and :mod:`.cpu_executor` (the NumPy reference of every kernel).
* :mod:`.errors` (:class:`PlanError`, :class:`CollectiveError`, the rank-agreement check),
  :mod:`.validation` (what a plan's arguments and a call's operands must be), :mod:`.call_check`
  (every CPU call's check that all ranks call the same plan) and :mod:`.routing` (All-to-All routing).

Output semantics per primitive (``C_r = a_r @ b_r.T`` on rank ``r``, then the fused post-ops):

* ``all_reduce``: ``sum_r C_r`` on every rank, ``[M, N]``.
* ``reduce_scatter``: rank ``k`` gets the rows ``plan.owned_rows`` (block-cyclic, see
  :mod:`fo_lib.reorder`) of ``sum_r C_r``; :meth:`OverlapPlan.all_gather` restores ``[M, N]``.
* ``all_to_all``: rank ``q`` gets row ``i`` of rank ``s`` at row ``dst_index[s][i]`` whenever
  ``dest[s][i] == q`` (MoE combine).
"""
from .errors import CollectiveError, PlanError, check_plans_agree
from .layouts import LAYOUTS, PRIMITIVES, REDUCTIONS, group_collective, layout_config
from .plan import OverlapPlan
from .routing import Routing
from .validation import DEVICES, SCHEDULES

__all__ = ["CollectiveError", "DEVICES", "LAYOUTS", "OverlapPlan", "PRIMITIVES", "PlanError", "REDUCTIONS",
           "Routing", "SCHEDULES", "check_plans_agree", "group_collective", "layout_config"]
