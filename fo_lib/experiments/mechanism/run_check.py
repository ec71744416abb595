"""Holding the trace against a real run: a CPU run of :class:`fo_lib.engine.OverlapPlan` on a
:class:`RecordingCommunicator` (:func:`run_recorded`), checked collective by collective
(:func:`check_against_run`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...comm.cpu_loopback import CpuLoopbackCommunicator
from .trace import MechanismError, Trace, post_reorder, predicted_buffers


class RecordingCommunicator(CpuLoopbackCommunicator):
    """The CPU loopback, recording each AllReduce: where its slice lies in ``watch`` (the plan's
    send buffer, set by :func:`run_recorded`) and a copy of the whole buffer after it."""

    def __init__(self, world_size: int, rank: int = 0):
        super().__init__(world_size, rank)
        self.watch = None
        self.calls: list[dict] = []

    def all_reduce(self, buf, *, timeout_s: float | None = None) -> None:
        super().all_reduce(buf, timeout_s=timeout_s)
        if self.watch is not None:
            start = buf.storage_offset() - self.watch.storage_offset()
            self.calls.append({"slice": (start, start + buf.numel()),
                               "buffer": self.watch.double().numpy().copy()})


def run_recorded(plan, a, b):
    """One call of ``plan`` (built on a :class:`RecordingCommunicator`); returns the output and the
    recorded collectives (slice, send buffer after it), in the order they ran."""
    comm = plan.comm
    if not isinstance(comm, RecordingCommunicator):
        raise TypeError("build the plan on a RecordingCommunicator to record its collectives")
    comm.watch, comm.calls = plan.send, []
    out = plan.run(a, b)
    return out, list(comm.calls)


def check_against_run(trace: Trace, calls: list[dict], C: np.ndarray, world_size: int, out=None) -> pd.DataFrame:
    """Raise :class:`MechanismError` unless the plan's run did what the trace says: one collective per
    fired group, in the fired order, on the trace's slice, leaving the send buffer the trace predicts
    (exactly: summing ``W`` identical bf16 copies is a power-of-two scale for ``W`` = 1, 2, 4, ...;
    otherwise to a bf16 rounding), and, given ``out``, a post-reorder equal to ``W * C``. Returns
    one row per collective."""
    want = predicted_buffers(trace, C, world_size)
    exact = world_size & (world_size - 1) == 0
    if len(calls) != len(want):
        raise MechanismError(f"the plan ran {len(calls)} collectives, the trace fires {len(want)} groups")
    rows = []
    for g, call, buf in zip(trace.fired_order(), calls, want):
        sl = tuple(int(v) for v in trace.group_slices[g])
        err = float(np.abs(call["buffer"] - buf).max())
        ok = call["slice"] == sl and (err == 0 if exact else np.allclose(call["buffer"], buf, rtol=1e-2, atol=1e-2))
        if not ok:
            raise MechanismError(f"group G{g + 1}: the plan's collective ran on {call['slice']}, the trace says {sl}; "
                                 f"largest buffer difference {err:g}")
        rows.append({"group": f"G{g + 1}", "trace slice": sl, "plan slice": call["slice"],
                     "max |plan buffer - trace buffer|": err})
    if out is not None:
        final = post_reorder(trace, want[-1])
        got = np.asarray(out, dtype=np.float64)
        if not (np.array_equal(got, final) if exact else np.allclose(got, final, rtol=1e-2, atol=1e-2)):
            raise MechanismError("the plan's output differs from the trace's post-reorder of its buffer")
    return pd.DataFrame(rows)
