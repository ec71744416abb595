"""Communication backends behind one protocol.

A :class:`Communicator` runs a collective on 1-D tensor slices, enqueued on the *current* torch
stream (the engine makes its high-priority communication stream current around each call):

* ``all_reduce(buf)``: in place, sum.
* ``reduce_scatter(send, recv)``: ``send`` holds ``world_size`` equal chunks; rank ``k`` receives the
  sum of every rank's chunk ``k`` in ``recv``.
* ``all_gather(send, recv)``: ``recv`` = every rank's ``send``, in rank order.
* ``all_to_all(send, send_counts, recv, recv_counts)``: ``send`` holds the elements for rank 0, 1, ...
  back to back (``send_counts[d]`` each); ``recv`` receives from rank 0, 1, ... (``recv_counts[s]``).

Each takes a keyword ``timeout_s`` (None: the communicator's own): how long a collective that blocks
the host (gloo) may wait for its peers. Optional: ``all_gather_object(obj)`` (every rank's ``obj``;
it may take ``timeout_s`` too), which the engine uses to check that every rank built the same plan
and, with it present, that every CPU call runs the same plan; communicators of identical virtual
ranks have none.

Implementations: :class:`~fo_lib.comm.torch_dist.TorchDistCommunicator` (NCCL on GPUs, gloo on CPUs,
world from ``torch.distributed``), :class:`~fo_lib.comm.loopback.LoopbackCommunicator` (one GPU,
an emulated link of ``W`` identical virtual ranks; everything it produces is labelled "emulated")
and :class:`~fo_lib.comm.cpu_loopback.CpuLoopbackCommunicator` (the same ranks on the CPU, in one
process, no GPU; :mod:`fo_lib.comm.virtual` holds what such ranks give back).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable


class CommError(ValueError):
    """A communicator's arguments, or a collective's operands, that cannot work (one line)."""


@runtime_checkable
class Communicator(Protocol):
    world_size: int
    rank: int
    link: str  # "nccl", "gloo" or "emulated"

    def all_reduce(self, buf, *, timeout_s: float | None = None) -> None: ...

    def reduce_scatter(self, send, recv, *, timeout_s: float | None = None) -> None: ...

    def all_gather(self, send, recv, *, timeout_s: float | None = None) -> None: ...

    def all_to_all(self, send, send_counts, recv, recv_counts, *, timeout_s: float | None = None) -> None: ...


def check_counts(counts, world_size: int, total: int, what: str) -> list[int]:
    """Per-peer element counts as ints, validated against the world size and the slice length."""
    counts = [int(c) for c in counts]
    if len(counts) != world_size:
        raise CommError(f"{what}: {len(counts)} counts for a world of {world_size}")
    if any(c < 0 for c in counts):
        raise CommError(f"{what}: negative count in {counts}")
    if sum(counts) != total:
        raise CommError(f"{what}: counts sum to {sum(counts)}, the slice holds {total} elements")
    return counts


def comm_buffer(comm, numel: int, dtype, device):
    """An uninitialised 1-D CUDA tensor for ``comm``'s collectives: from the communicator's own
    ``empty`` where it has one (NCCL symmetric windows, ``TorchDistCommunicator(copy_engine=True)``:
    collective, every rank allocates alike), else a plain ``torch.empty``."""
    import torch

    empty = getattr(comm, "empty", None)
    return torch.empty(numel, dtype=dtype, device=device) if empty is None else empty(numel, dtype, device)
