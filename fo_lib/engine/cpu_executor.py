"""The CPU executor: the NumPy reference of every kernel of a call, group by group.

The GEMM output is scattered into the send buffer one group at a time through the plan's own
tables, each group's collective runs right after its scatter, and the post-reorder reference
restores the output. With gloo this runs the whole orchestration in multi-process CI tests; with
:class:`fo_lib.comm.cpu_loopback.CpuLoopbackCommunicator` in one process.
"""
from __future__ import annotations

import inspect
import weakref
import numpy as np

from .. import reorder
from ..postops import post_reorder_reference


class CpuExecutor:
    def __init__(self, plan):
        import torch

        # A proxy, not a reference: a plan <-> executor cycle would leave dropped plans to the cyclic
        # GC, which may free their pinned buffers and events in the middle of another plan's graph
        # capture and invalidate it.
        self.plan = weakref.proxy(plan)
        self.device = torch.device("cpu")
        # Zeroed once: padding of tail subtiles is never written but does take part in reductions.
        self.send = torch.zeros(plan.tables.buffer_elements, dtype=plan.torch_dtype)
        self.recv = torch.zeros(plan.recv_elements, dtype=plan.torch_dtype) if plan.buffer_layout.result == "recv" \
            else None
        self._scatter = self._group_indices()
        # Only the CPU executor's collectives block the host: bound each by the plan's timeout, where
        # the communicator takes one (the protocol's keyword; older communicators may lack it).
        self.collective_kw = {"timeout_s": plan.timeout_ns / 1e9} if takes_timeout(plan.comm) else {}

    def _group_indices(self) -> list:
        """Per group, (positions in C.flat, positions in the send buffer)."""
        import torch

        p = self.plan
        idx = reorder.element_index(p.tables.row_offset, p.N, p.grid.BN)
        tile = (np.arange(p.M)[:, None] // p.grid.BM) * p.grid.tiles_n + np.arange(p.N)[None, :] // p.grid.BN
        group = p.tables.tile_group[tile]
        flat = np.arange(p.M * p.N).reshape(p.M, p.N)
        return [(torch.from_numpy(flat[group == g]), torch.from_numpy(idx[group == g])) for g in range(p.num_groups)]

    def run(self, a, b, ops, operands: dict):
        import torch

        p = self.plan
        c = (a.float() @ b.float().T).to(p.torch_dtype).reshape(-1)
        for g, (src, dst) in enumerate(self._scatter):
            self.send[dst] = c[src]  # the group's tiles are done: its collective may start
            p.collective(g, self.send, self.recv, **self.collective_kw)
        src = self.send if p.buffer_layout.result == "send" else self.recv
        residual_out = operands.get("residual_out")
        res_out = None if residual_out is None else np.empty((p.out_rows, p.N))
        y = post_reorder_reference(src.double().numpy(), p.post_table, (p.out_rows, p.N), p.grid.BN, ops,
                                   bias=_np(operands.get("bias")), residual=_np(operands.get("residual")),
                                   residual_out=res_out, weight=_np(operands.get("weight")),
                                   sources=p.sources, peer_stride=p.buffer_layout.peer_stride)
        if residual_out is not None:
            residual_out.copy_(torch.from_numpy(res_out))
        out = torch.from_numpy(y).to(p.torch_dtype)
        if operands.get("out") is not None:
            operands["out"].copy_(out)
            return operands["out"]
        return out

    def join_streams(self) -> None:
        """Nothing to order: the CPU runs a call's steps one after another."""

    def restore(self, gathered, table, ops, operands: dict):
        """The post step of ReduceScatter's AllGather (:meth:`OverlapPlan.all_gather`)."""
        import torch

        y = post_reorder_reference(gathered.double().numpy(), table, (self.plan.M, self.plan.N), self.plan.grid.BN,
                                   ops, **{k: _np(v) for k, v in operands.items()})
        return torch.from_numpy(y).to(gathered.dtype)


def takes_timeout(comm) -> bool:
    """Whether ``comm``'s collectives accept the protocol's ``timeout_s`` keyword."""
    try:  # looked up statically: inspecting the method must not run anything of the communicator
        params = inspect.signature(inspect.getattr_static(comm, "all_reduce")).parameters.values()
    except (AttributeError, TypeError, ValueError):
        return False
    return any(p.name == "timeout_s" or p.kind is p.VAR_KEYWORD for p in params)


def _np(t):
    return None if t is None else t.double().numpy()
