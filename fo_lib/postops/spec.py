"""What the post-reorder fuses: :class:`PostOps` (validated on construction), the limits of the
kernel that runs it, and the checks that the NumPy reference and the launch share. Pure: NumPy only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ACTIVATIONS = ("none", "relu", "silu", "gelu_tanh", "gelu_erf")
ACT_CODE = {name: i for i, name in enumerate(ACTIVATIONS)}  # must match fo::ACT_* in post_reorder.cuh
DTYPES = ("bf16", "f16")

CHUNK = 8                 # elements per thread-chunk (one 16-byte access on the vectorized path)
MAX_THREADS_PER_ROW = 1024
NORM_ITEMS = 4            # chunks per thread held in registers by the RMSNorm variant
MAX_NORM_N = MAX_THREADS_PER_ROW * NORM_ITEMS * CHUNK  # 32768: the row must fit in registers
MAX_N = 2**31 - 2**16     # int32 column indices in the kernel (with room for the last stripe)
MAX_SOURCES = 8           # copies summed per element (the world size of a gathered AllReduce)


@dataclass(frozen=True)
class PostOps:
    """Which element-wise operations the post-reorder kernel fuses (each a compile-time flag).

    ``activation`` is one of :data:`ACTIVATIONS` (``"gelu-tanh"`` style spellings are accepted and
    normalised). ``residual_out`` stores the pre-norm value (after bias, activation and residual);
    it may be the residual tensor itself (in-place update, as in fused add + RMSNorm).
    """

    bias: bool = False
    activation: str = "none"
    residual: bool = False
    residual_out: bool = False
    rmsnorm: bool = False
    eps: float = 1e-6

    def __post_init__(self) -> None:
        for name in ("bias", "residual", "residual_out", "rmsnorm"):
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"PostOps.{name} must be a bool, got {value!r}")
            object.__setattr__(self, name, bool(value))
        if not isinstance(self.activation, str):
            raise TypeError(f"PostOps.activation must be a string, got {self.activation!r}")
        act = self.activation.strip().lower().replace("-", "_")
        if act not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; choose one of {ACTIVATIONS}")
        object.__setattr__(self, "activation", act)
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float, np.floating, np.integer)):
            raise TypeError(f"PostOps.eps must be a number, got {self.eps!r}")
        eps = float(self.eps)
        if not math.isfinite(eps) or eps < 0.0:
            raise ValueError(f"PostOps.eps must be finite and >= 0, got {self.eps!r}")
        if eps > 1e30:
            raise ValueError(f"PostOps.eps={eps} is too large for the fp32 kernel")
        object.__setattr__(self, "eps", eps)

    @property
    def is_identity(self) -> bool:
        """A plain gather: no element-wise work at all."""
        return not (self.bias or self.residual or self.residual_out or self.rmsnorm) and self.activation == "none"

    def describe(self) -> str:
        parts = []
        if self.bias:
            parts.append("bias")
        if self.activation != "none":
            parts.append(self.activation)
        if self.residual:
            parts.append("residual")
        if self.residual_out:
            parts.append("residual_out")
        if self.rmsnorm:
            parts.append(f"rmsnorm(eps={self.eps:g})")
        return "+".join(parts) or "gather"


def check_dtype_name(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return dtype


def check_sources(sources) -> int:
    if isinstance(sources, bool) or not isinstance(sources, (int, np.integer)) or not 1 <= sources <= MAX_SOURCES:
        raise ValueError(f"sources must be an integer in [1, {MAX_SOURCES}], got {sources!r}")
    return int(sources)


def require_operand(flag: bool, value, name: str) -> None:
    if flag and value is None:
        raise ValueError(f"PostOps enables {name} but no {name} was given")
    if not flag and value is not None:
        raise ValueError(f"{name} was given but PostOps does not enable it")
