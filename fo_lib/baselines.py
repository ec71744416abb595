"""Baselines with the same output semantics as :class:`fo_lib.engine.OverlapPlan`.

* :func:`sequential`: ``torch.matmul`` for the whole output, then one collective, then the post-ops
  in torch (the paper's non-overlap baseline).
* :func:`decomposition`: the GEMM split into ``chunks`` row blocks; block ``i``'s collective runs on a
  high-priority stream while block ``i+1`` is computed (the paper's VanillaDecomposition, with the
  number of chunks tunable).

Both take the plan for its semantics (shape, communicator, ReduceScatter row ownership, All-to-All
routing) but use none of its kernels or tables.
"""
from __future__ import annotations

import numpy as np

from .postops import PostOps
from ._util import require_torch



def torch_post_ops(y, ops: PostOps, *, bias=None, residual=None, weight=None, residual_out=None):
    """The fused post-ops of :mod:`fo_lib.postops` written in torch (fp32 math, one rounding);
    ``residual_out`` (with ``ops.residual_out``) receives the pre-norm values, as in the kernel."""
    torch = require_torch()
    F = torch.nn.functional
    v = y.float()
    if ops.bias:
        v = v + bias.float()
    if ops.activation == "relu":
        v = F.relu(v)
    elif ops.activation == "silu":
        v = F.silu(v)
    elif ops.activation == "gelu_tanh":
        v = F.gelu(v, approximate="tanh")
    elif ops.activation == "gelu_erf":
        v = F.gelu(v)
    if ops.residual:
        v = v + residual.float()
    if residual_out is not None:
        if not ops.residual_out:
            raise ValueError("residual_out given but ops.residual_out is False")
        residual_out.copy_(v)
    if ops.rmsnorm:
        v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + ops.eps) * weight.float()
    return v.to(y.dtype)


def matmul(a, b):
    """``a @ b.T``; on the CPU in fp32 like the engine's CPU GEMM (a bf16 matmul there rounds more)."""
    if a.is_cuda:
        return a @ b.T
    return (a.float() @ b.float().T).to(a.dtype)  # CPU: fp32 accumulation like the GPU kernels


def _index(idx, device):
    """A host index array on ``device`` without a host-device synchronisation (a pageable copy would
    block the host until the GPU reaches it, serialising the baseline's launches)."""
    torch = require_torch()
    t = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64))
    if device.type != "cuda":
        return t
    return t.pin_memory().to(device, non_blocking=True)


def _exchange(plan, c, rows: np.ndarray):
    """The collective of ``plan.primitive`` on the output rows ``rows`` (global indices) held in ``c``.

    Returns ``(local_rows, values)``: which rows of this rank's output the result fills, and them.
    """
    torch = require_torch()
    comm, W, N = plan.comm, plan.world_size, plan.N
    if plan.primitive == "all_reduce":
        flat = c.reshape(-1).contiguous()
        comm.all_reduce(flat)
        return rows, flat.view(-1, N)
    if plan.primitive == "reduce_scatter":
        owner = ((rows % plan.grid.BM) // (plan.grid.BM // W))
        counts = np.bincount(owner, minlength=W)
        R = int(counts.max())
        send = torch.zeros(W, R, N, dtype=c.dtype, device=c.device)
        for k in range(W):
            sel = np.flatnonzero(owner == k)
            send[k, :len(sel)] = c[_index(sel, c.device)]
        recv = torch.empty(R * N, dtype=c.dtype, device=c.device)
        comm.reduce_scatter(send.reshape(-1), recv)
        mine = rows[owner == plan.rank]
        local = np.searchsorted(plan.owned_rows, mine)
        return local, recv.view(R, N)[:len(mine)]
    # all_to_all: rows sorted by destination; the receiver places them by dst_index.
    dest = [np.asarray(d)[rows] for d in plan.routing.dest]
    idx = [np.asarray(x)[rows] for x in plan.routing.dst_index]
    order = np.argsort(dest[plan.rank], kind="stable")
    send = c[_index(order, c.device)].reshape(-1).contiguous()
    send_counts = np.bincount(dest[plan.rank], minlength=W) * N
    recv_counts = np.array([int((d == plan.rank).sum()) for d in dest]) * N
    recv = torch.empty(int(recv_counts.sum()), dtype=c.dtype, device=c.device)
    comm.all_to_all(send, send_counts.tolist(), recv, recv_counts.tolist())
    local = np.concatenate([x[d == plan.rank] for d, x in zip(dest, idx)]) if W else np.zeros(0, int)
    return local, recv.view(-1, N)


def _finish(plan, pieces, ops, operands):
    torch = require_torch()
    out = None
    for local, values in pieces:
        local = np.asarray(local, dtype=np.int64)
        if len(pieces) == 1 and len(local) == plan.out_rows and np.array_equal(local, np.arange(plan.out_rows)):
            out = values[:plan.out_rows]  # the whole output in order (AllReduce): no copy
            break
        if out is None:
            out = torch.empty(plan.out_rows, plan.N, dtype=values.dtype, device=values.device)
        if len(local) and np.array_equal(local, np.arange(local[0], local[0] + len(local))):
            out[int(local[0]):int(local[0]) + len(local)] = values[:len(local)]  # a row block
        elif len(local):
            out[_index(local, values.device)] = values[:len(local)]
    return torch_post_ops(out, ops, **operands)


def sequential(plan, a, b, *, ops: PostOps = PostOps(), **operands):
    """GEMM, then one collective, then the post-ops."""
    c = matmul(a, b)
    return _finish(plan, [_exchange(plan, c, np.arange(plan.M))], ops, operands)


def decomposition(plan, a, b, *, chunks: int = 2, ops: PostOps = PostOps(), comm_stream=None, **operands):
    """GEMM in ``chunks`` row blocks, each block's collective overlapped with the next block's GEMM."""
    torch = require_torch()
    if not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks must be a positive integer, got {chunks!r}")
    bounds = np.linspace(0, plan.M, chunks + 1).astype(int)
    pieces = []
    if not a.is_cuda:
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            pieces.append(_exchange(plan, matmul(a[lo:hi], b), np.arange(lo, hi)))
        return _finish(plan, pieces, ops, operands)
    compute = torch.cuda.current_stream()
    comm_stream = comm_stream or torch.cuda.Stream(priority=-100)
    comm_stream.wait_stream(compute)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        c = matmul(a[lo:hi], b)
        done = torch.cuda.Event()
        done.record(compute)
        with torch.cuda.stream(comm_stream):
            comm_stream.wait_event(done)
            pieces.append(_exchange(plan, c, np.arange(lo, hi)))
            c.record_stream(comm_stream)
    compute.wait_stream(comm_stream)
    return _finish(plan, pieces, ops, operands)
