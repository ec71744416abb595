"""What a plan's arguments and a call's operands must satisfy, checked before anything is built or
launched: every refusal is a :class:`PlanError` of one line that says what was expected."""
from __future__ import annotations

import math
import numbers

import numpy as np

from .errors import PlanError
from .layouts import layout_class

DEVICES = ("cuda", "cpu")
SCHEDULES = ("persistent", "per_tile")
DTYPES = {"bf16": "bfloat16", "f16": "float16"}
# The largest timeout a plan takes (about 11.6 days): CUDA waits count nanoseconds in 64 bits and a
# Python timedelta holds at most 10^9 days, so a larger value cannot be honoured as given.
MAX_TIMEOUT_MS = 1e9
# The largest operand or output a plan takes, in elements (16 GiB of bf16), and the largest side: the
# kernels index a dimension with 32-bit integers, and a larger operand fits no GPU beside the
# plan's buffers (a host MemoryError at build otherwise).
MAX_ELEMENTS = 2 ** 33
MAX_DIM = 2 ** 31 - 1
POST_OPERANDS = ("bias", "residual", "residual_out", "weight", "out")


def is_int(v) -> bool:
    """A whole number given as one (not a bool, a float or a string)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _int_at_least(name: str, v, low: int, what: str = "") -> None:
    if not is_int(v) or v < low:
        kind = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise PlanError(f"{name} must be {kind}{what}, got {v!r}")


def check_comm(comm) -> None:
    """A communicator of the protocol (:class:`fo_lib.comm.Communicator`) with a valid world."""
    # Attributes only: looking up a collective may already reach a communicator's machinery.
    if comm is None or not all(hasattr(comm, m) for m in ("world_size", "rank")):
        raise PlanError(f"comm must be a Communicator (fo_lib.comm: world_size, rank, collectives), got "
                        f"{type(comm).__name__}")
    W, rank = comm.world_size, comm.rank
    _int_at_least("comm.world_size", W, 1)
    if not is_int(rank) or not 0 <= rank < W:
        raise PlanError(f"comm.rank must be an integer in [0, {W}), got {rank!r}")


def validate_arguments(primitive, M, N, K, comm, *, dtype, device, timeout_ms, schedule, layout, reduction,
                       config=None, ctas=None, comm_sms=None, max_groups=8, sm_count=None, comm_graph=True,
                       routing=None):
    """Everything a plan's arguments must satisfy before anything is built; the buffer layout's
    class (:func:`fo_lib.engine.layouts.layout_class`)."""
    cls = layout_class(primitive, layout, reduction)
    if device not in DEVICES:
        raise PlanError(f"device must be one of {DEVICES}, got {device!r}")
    if dtype not in DTYPES:
        raise PlanError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    for name, v in (("M", M), ("N", N), ("K", K)):
        if not is_int(v) or v <= 0:
            raise PlanError(f"{name} must be a positive integer, got {v!r}")
        if v > MAX_DIM:
            raise PlanError(f"{name} must be at most {MAX_DIM} (32-bit indices), got {v}")
    for name, n in (("a (M x K)", M * K), ("b (N x K)", N * K), ("the output (M x N)", M * N)):
        if n > MAX_ELEMENTS:
            raise PlanError(f"{name} must hold at most 2^33 elements, got {n}")
    if K % 8:
        raise PlanError(f"K must be a multiple of 8 (16-byte rows for the GEMM's loads), got {K}")
    if (isinstance(timeout_ms, bool) or not isinstance(timeout_ms, numbers.Real) or not math.isfinite(timeout_ms)
            or not 0 < timeout_ms <= MAX_TIMEOUT_MS):
        raise PlanError(f"timeout_ms must be a number of milliseconds in (0, {MAX_TIMEOUT_MS:g}], got {timeout_ms!r}")
    if timeout_ms < 1e-3:
        raise PlanError(f"timeout_ms must be at least 1e-3 (one microsecond), got {timeout_ms!r}")
    if schedule not in SCHEDULES:
        raise PlanError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    _int_at_least("max_groups", max_groups, 1)
    for name, v, low in (("ctas", ctas, 1), ("comm_sms", comm_sms, 0), ("sm_count", sm_count, 1)):
        if v is not None:
            _int_at_least(name, v, low, " or None")
    if not isinstance(comm_graph, (bool, np.bool_)):
        raise PlanError(f"comm_graph must be a bool, got {comm_graph!r}")
    from .routing import Routing
    if routing is not None and (primitive != "all_to_all" or not isinstance(routing, Routing)):
        raise PlanError(f"routing must be a fo_lib.engine.Routing for all_to_all (None otherwise), got "
                        f"{type(routing).__name__} for {primitive}")
    from .. import gemm
    if config is not None and not isinstance(config, gemm.RasterMixin):
        raise PlanError(f"config must be a GemmConfig or Sm90Config (fo_lib.gemm) or None, got {config!r}")
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise PlanError("device='cuda' needs a CUDA GPU and none is visible; use device='cpu'")
    if getattr(comm, "copy_engine", False) and not cls.copy_engine_ok:
        raise PlanError("a copy-engine communicator leaves the GEMM all SMs but one, so only the data movement of "
                        "reduction='post_reorder' (AllGather or All-to-All on the copy engines, no SM) can run "
                        "beside it; use NCCL's default communicator for this plan")
    return cls


def check_partition_form(partition) -> tuple[int, ...]:
    """A partition's form (a sequence of positive whole wave counts); its sum is checked against the
    GEMM's waves by :func:`fo_lib.partition.validate_partition`."""
    if isinstance(partition, (str, bytes)) or not hasattr(partition, "__iter__"):
        raise PlanError(f"partition must be a sequence of positive integers (waves per group), None or a "
                        f"callable, got {partition!r}")
    part = tuple(partition)
    if not part or not all(is_int(g) and g >= 1 for g in part):
        raise PlanError(f"partition must be a non-empty sequence of positive integers (waves per group), got "
                        f"{partition!r}")
    return tuple(int(g) for g in part)


def check_partition(partition, num_waves: int) -> tuple[int, ...]:
    """A partition of the GEMM's ``num_waves`` waves: its form, then its sum."""
    from ..partition import validate_partition
    part = check_partition_form(partition)
    try:
        return validate_partition(part, num_waves)
    except ValueError as exc:  # a sum that misses the GEMM's waves: the plan's own error, one line
        raise PlanError(str(exc)) from None


def _named(t, name: str) -> str:
    return f"{name} must be a torch.Tensor, got {type(t).__name__}"


def check_tensor(plan, t, name: str, shape: tuple) -> None:
    """One tensor of a call: the plan's dtype on its device, contiguous, of ``shape``, no grad."""
    import torch

    dev = plan.executor.device
    if not isinstance(t, torch.Tensor):
        raise PlanError(_named(t, name))
    if tuple(t.shape) != shape:
        if name in POST_OPERANDS:
            raise PlanError(f"{name} must be a {list(shape)} tensor for this plan, got {tuple(t.shape)}")
        raise PlanError(f"{name} must have shape {shape} for this plan, got {tuple(t.shape)}")
    if t.dtype != plan.torch_dtype:
        raise PlanError(f"{name} must be {plan.torch_dtype} for this plan, got {t.dtype}")
    if t.device.type != dev.type or (dev.type == "cuda" and t.device != dev):
        raise PlanError(f"{name} is on {t.device}, the plan on {dev}")
    if name == "out":  # the post-reorder writes rows at any row stride (out may be a slice)
        if t.stride(1) != 1 or (shape[0] > 1 and t.stride(0) < shape[1]):
            raise PlanError(f"out must be row-major (unit column stride, row stride >= {shape[1]}), got strides "
                            f"{t.stride()}")
    elif not t.is_contiguous():
        raise PlanError(f"{name} must be contiguous")
    if t.requires_grad:
        # No gradient flows through the overlapped op: a tensor that wants one would silently lose it.
        raise PlanError(f"{name} must not require grad (the overlapped op is forward-only): pass {name}.detach()")


def check_operands(plan, a, b) -> None:
    """A call's ``a`` [M, K] and ``b`` [N, K]: torch tensors of the plan's dtype on its device."""
    check_tensor(plan, a, "a", (plan.M, plan.K))
    check_tensor(plan, b, "b", (plan.N, plan.K))


def check_post_operands(plan, ops, operands: dict) -> None:
    """The post-ops and their operands: each one the ops enable given, of its shape, and no other."""
    from ..postops import PostOps

    if not isinstance(ops, PostOps):
        raise PlanError(f"ops must be a fo_lib.postops.PostOps, got {type(ops).__name__}")
    unknown = set(operands) - set(POST_OPERANDS)
    if unknown:
        raise PlanError(f"unknown post-reorder operands {sorted(unknown)}; expected some of {POST_OPERANDS}")
    rows = (plan.out_rows, plan.N)
    for name, flag, shape in (("bias", ops.bias, (plan.N,)), ("residual", ops.residual, rows),
                              ("residual_out", ops.residual_out, rows), ("weight", ops.rmsnorm, (plan.N,)),
                              ("out", None, rows)):
        t = operands.get(name)
        if t is None:
            if flag and name != "residual_out":  # residual_out is optional: the pre-norm values may be dropped
                raise PlanError(f"ops enables {name}: pass {name}= (a {list(shape)} {plan.dtype} tensor)")
            continue
        if flag is False:
            flag_name = "rmsnorm" if name == "weight" else name
            raise PlanError(f"{name} was given but ops does not enable it (PostOps({flag_name}=True))")
        check_tensor(plan, t, name, shape)
