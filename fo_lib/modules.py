"""Drop-in torch modules built on :class:`fo_lib.engine.OverlapPlan`.

* :class:`RowParallelLinear`: ``y = AllReduce(x @ W_r^T)`` over the tensor-parallel ranks, then the
  fused post-ops (bias, activation, residual, RMSNorm) in the post-reorder kernel. ``W_r`` is this
  rank's ``[out_features, in_features / world]`` slice (the row-parallel half of a Megatron MLP or
  attention output projection). With ``PostOps(residual=True, residual_out=True, rmsnorm=True)``
  the forward returns ``(normed, pre_norm)``: the pre-norm sum is the residual stream a transformer
  block carries on (fused add + RMSNorm, as in vLLM).
* :class:`SequenceParallelLinear`: the same GEMM with ReduceScatter: each rank keeps its rows of the
  sum (``plan.owned_rows``, block-cyclic); :meth:`SequenceParallelLinear.gather` is the AllGather
  that restores global row order.
* :class:`MoECombine`: each rank's expert output ``x @ W_e^T`` goes back to the tokens' home ranks
  with one All-to-All, given a :class:`fo_lib.engine.Routing`.

A plan is built per input shape (and routing) on first use and cached, so the first call of a new
shape pays for tables, buffers and kernel loading; later calls only launch. ``partition`` picks the
wave groups: a tuple, a callable ``(M, N, K, T) -> tuple`` (e.g. a tuner), or ``None`` for the
engine's default. ``graphs=True`` replays each shape's call as a CUDA graph after the first call
(inputs are copied into the graph's static buffers; see :meth:`OverlapPlan.capture`).
``check=OverlapCheck()`` (:class:`fo_lib.partition_tuning.OverlapCheck`) times each new shape's overlapped
call against the non-overlapped fallback (:func:`fo_lib.baselines.sequential`: the GEMM, one
collective, the post-ops; the same result) on its first call, and runs the fallback from then on
where overlap does not win. (It times eager calls, so with ``graphs=True`` it errs towards the
fallback.)

The modules run the forward pass only (inference): no gradient flows through the overlapped op.
"""
from __future__ import annotations

import dataclasses

from .engine import OverlapPlan, PlanError, Routing
from .postops import PostOps
from ._util import require_torch



OUTPUT_OPERANDS = ("residual_out",)  # post-reorder operands the call writes, not reads


def _tdtype(dtype: str):
    torch = require_torch()
    return {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]


def _module_base():
    return require_torch().nn.Module


# OverlapPlan's keywords a module's plan_kw may set (the module sets the others itself).
PLAN_KW = ("config", "ctas", "comm_sms", "max_groups", "timeout_ms", "sm_count", "comm_graph", "schedule",
           "layout", "reduction")


def check_module_arguments(in_features, out_features, comm, *, dtype, device, ops, plan_kw, **flags) -> None:
    """A module's constructor arguments, before any parameter is allocated: :class:`PlanError`."""
    from .engine.validation import DEVICES, DTYPES, check_comm, is_int

    for name, v in (("in_features", in_features), ("out_features", out_features)):
        if not is_int(v) or v < 1:
            raise PlanError(f"{name} must be a positive integer, got {v!r}")
    check_comm(comm)
    if dtype not in DTYPES:
        raise PlanError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    if device not in DEVICES:
        raise PlanError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "cuda" and not require_torch().cuda.is_available():
        raise PlanError("device='cuda' needs a CUDA GPU and none is visible; use device='cpu'")
    if not isinstance(ops, PostOps):
        raise PlanError(f"ops must be a fo_lib.postops.PostOps, got {type(ops).__name__}")
    for name, v in flags.items():
        if not isinstance(v, bool):
            raise PlanError(f"{name} must be a bool, got {v!r}")
    if plan_kw is not None and (not isinstance(plan_kw, dict) or set(plan_kw) - set(PLAN_KW)):
        extra = sorted(set(plan_kw) - set(PLAN_KW)) if isinstance(plan_kw, dict) else type(plan_kw).__name__
        raise PlanError(f"plan_kw must be a dict of OverlapPlan keywords among {PLAN_KW}, got {extra}")


def _check_input(x, width: int, what: str) -> None:
    torch = require_torch()
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != width:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise PlanError(f"input must be a [{what}, {width}] tensor, got {got}")


class _PlanCache:
    """Plans keyed by shape (and routing), with optional CUDA-graph replay per plan and the
    overlap-or-fallback decision of an :class:`~fo_lib.partition_tuning.OverlapCheck` per plan."""

    def __init__(self, primitive, comm, *, dtype, device, partition, graphs, plan_kw, check=None):
        from .partition_tuning import OverlapCheck
        if check is not None and not isinstance(check, OverlapCheck):
            raise TypeError(f"check must be an OverlapCheck or None, got {type(check).__name__}")
        self.primitive, self.comm, self.dtype, self.device = primitive, comm, dtype, device
        self.partition, self.graphs, self.plan_kw = partition, graphs, dict(plan_kw or {})
        self.check = check
        self.plans: dict = {}

    def plan(self, M: int, N: int, K: int, routing: Routing | None = None) -> OverlapPlan:
        # The cached plan holds the routing object, so its id cannot be reused while the entry lives.
        key = (M, N, K, id(routing))
        plan = self.plans.get(key)
        if plan is None:
            plan = OverlapPlan(self.primitive, M, N, K, self.comm, dtype=self.dtype, device=self.device,
                               routing=routing, partition=self.partition, **self.plan_kw)
            self.plans[key] = plan
        return plan

    def overlaps(self, plan: OverlapPlan, x, weight, ops: PostOps, operands: dict) -> bool:
        """Whether calls of ``plan`` overlap (decided by the check on the plan's first call)."""
        if self.check is None:
            return True
        keep = getattr(plan, "_module_keep", None)
        if keep is None:
            from . import baselines
            keep = self.check.keep(self.comm, lambda: plan.run(x, weight, ops=ops, **operands),
                                   lambda: baselines.sequential(plan, x, weight, ops=ops, **operands),
                                   device=self.device)
            plan._module_keep = keep
        return keep

    def run(self, plan: OverlapPlan, x, weight, ops: PostOps, operands: dict):
        if not self.overlaps(plan, x, weight, ops, operands):
            from . import baselines
            return baselines.sequential(plan, x, weight, ops=ops, **operands)
        if not (self.graphs and self.device == "cuda"):
            return _owned(plan, plan.run(x, weight, ops=ops, **operands))
        graphed = getattr(plan, "_module_graph", None)
        if graphed is None:
            first = _owned(plan, plan.run(x, weight, ops=ops, **operands))  # eager once, then capture
            static = {"a": x.clone(), "b": weight.detach().clone(),
                      **{k: v.clone() for k, v in operands.items() if v is not None}}
            graphed = plan.capture(static["a"], static["b"], ops=ops,
                                   **{k: static[k] for k in operands if operands[k] is not None})
            plan._module_graph, plan._module_static = graphed, static
            return first
        static = plan._module_static
        static["a"].copy_(x)
        static["b"].copy_(weight.detach())
        for k, v in operands.items():
            if v is not None and k not in OUTPUT_OPERANDS:
                static[k].copy_(v)
        y = graphed().clone()
        for k in OUTPUT_OPERANDS:  # the replay wrote them into its static buffers
            if operands.get(k) is not None:
                operands[k].copy_(static[k])
        return y


def _owned(plan: OverlapPlan, y):
    """A module's output must outlive the next call: the rows layout without post-ops returns the
    plan's buffer itself, which the next call overwrites, so that one is copied."""
    return y.clone() if plan.layout == "rows" and y.data_ptr() == plan.send.data_ptr() else y


class _LinearBase(_module_base()):
    primitive = "all_reduce"

    def __init__(self, in_features: int, out_features: int, comm, *, bias: bool = False, ops: PostOps = PostOps(),
                 dtype: str = "bf16", device: str = "cuda", partition=None, graphs: bool = False,
                 plan_kw: dict | None = None, check=None):
        check_module_arguments(in_features, out_features, comm, dtype=dtype, device=device, ops=ops, plan_kw=plan_kw,
                               bias=bias, graphs=graphs)
        super().__init__()
        torch = require_torch()
        ops = dataclasses.replace(ops, bias=bool(bias))
        self.in_features, self.out_features, self.comm, self.ops = int(in_features), int(out_features), comm, ops
        dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, dtype=_tdtype(dtype), device=dev))
        torch.nn.init.normal_(self.weight, std=in_features ** -0.5)
        self.bias = torch.nn.Parameter(torch.zeros(out_features, dtype=_tdtype(dtype), device=dev)) if bias else None
        self.norm_weight = (torch.nn.Parameter(torch.ones(out_features, dtype=_tdtype(dtype), device=dev))
                            if ops.rmsnorm else None)
        self._cache = _PlanCache(self.primitive, comm, dtype=dtype, device=device, partition=partition,
                                 graphs=graphs, plan_kw=plan_kw, check=check)

    def plan_for(self, x) -> OverlapPlan:
        _check_input(x, self.in_features, "tokens")
        return self._cache.plan(int(x.shape[0]), self.out_features, self.in_features)

    @property
    def plans(self) -> list[OverlapPlan]:
        """The plans built so far, one per input shape."""
        return list(self._cache.plans.values())

    def _forward(self, x, residual=None):
        """The output; with ``ops.residual_out`` ``(output, pre_norm)``, the pre-norm values in a
        tensor of their own (never the residual itself: an overlap check runs a call twice)."""
        plan = self.plan_for(x)
        operands = {"bias": self.bias, "residual": residual, "weight": self.norm_weight}
        if self.ops.residual and residual is None:
            raise PlanError("this module fuses a residual add: pass residual=")
        operands = {k: (None if v is None else v.detach()) for k, v in operands.items()}
        if self.ops.residual_out:
            operands["residual_out"] = self.weight.new_empty(plan.out_rows, self.out_features)
        y = self._cache.run(plan, x.detach().contiguous(), self.weight.detach(), self.ops, operands)
        return (y, operands["residual_out"]) if self.ops.residual_out else y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features} (per rank), out_features={self.out_features}, "
                f"world={self.comm.world_size} ({self.comm.link}), ops={self.ops}")


class RowParallelLinear(_LinearBase):
    """``AllReduce(x @ weight.T)`` + fused post-ops; ``x`` is this rank's ``[tokens, in_features]``
    slice of the activations, the result ``[tokens, out_features]`` is the same on every rank."""

    primitive = "all_reduce"

    def forward(self, x, residual=None):
        return self._forward(x, residual)


class SequenceParallelLinear(_LinearBase):
    """``ReduceScatter(x @ weight.T)`` + fused post-ops: this rank's rows ``plan.owned_rows`` of the
    sum. :meth:`gather` restores all ``[tokens, out_features]`` rows in global order."""

    primitive = "reduce_scatter"

    def forward(self, x, residual=None):
        return self._forward(x, residual)

    def owned_rows(self, tokens: int):
        """The global row indices this rank's output holds, in order."""
        return self._cache.plan(int(tokens), self.out_features, self.in_features).owned_rows

    def gather(self, local, tokens: int):
        return self._cache.plan(int(tokens), self.out_features, self.in_features).all_gather(local)


class MoECombine(_module_base()):
    """Expert output back to the tokens' ranks: ``x @ weight.T`` for this rank's expert, then an
    All-to-All with ``routing`` (row ``i`` of rank ``s`` lands at row ``routing.dst_index[s][i]`` of
    rank ``routing.dest[s][i]``); fused post-ops on the received rows."""

    def __init__(self, in_features: int, out_features: int, comm, *, ops: PostOps = PostOps(), dtype: str = "bf16",
                 device: str = "cuda", partition=None, plan_kw: dict | None = None, check=None):
        check_module_arguments(in_features, out_features, comm, dtype=dtype, device=device, ops=ops, plan_kw=plan_kw)
        super().__init__()
        torch = require_torch()
        if ops.bias or ops.rmsnorm or ops.residual_out:
            raise PlanError("MoECombine fuses activation and residual only (no bias, RMSNorm or residual_out here)")
        self.in_features, self.out_features, self.comm, self.ops = int(in_features), int(out_features), comm, ops
        dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, dtype=_tdtype(dtype), device=dev))
        torch.nn.init.normal_(self.weight, std=in_features ** -0.5)
        self._cache = _PlanCache("all_to_all", comm, dtype=dtype, device=device, partition=partition,
                                 graphs=False, plan_kw=plan_kw, check=check)

    def plan_for(self, x, routing: Routing) -> OverlapPlan:
        _check_input(x, self.in_features, "rows")
        return self._cache.plan(int(x.shape[0]), self.out_features, self.in_features, routing)

    @property
    def plans(self) -> list[OverlapPlan]:
        """The plans built so far, one per (input shape, routing)."""
        return list(self._cache.plans.values())

    def forward(self, x, routing: Routing, residual=None):
        plan = self.plan_for(x, routing)
        residual = None if residual is None else residual.detach()  # forward-only, as the linear modules
        return self._cache.run(plan, x.detach().contiguous(), self.weight.detach(), self.ops, {"residual": residual})
