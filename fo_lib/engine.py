"""The overlapped op: one signaled GEMM, a collective per wave group behind a counter wait, and a
post-reorder fused with element-wise work.

A :class:`OverlapPlan` is built once per (primitive, shape, dtype, world, link, partition): it holds
the tile grid, the mapping tables of :mod:`fo_lib.reorder`, the buffers and the counting table.
:meth:`OverlapPlan.run` then executes one call. Two executors share the orchestration:

* ``device="cuda"``: the signaled GEMM on the caller's stream; on a high-priority communication
  stream, for each group, :func:`fo_lib.counting.wait_epoch` on the group's counter and the group's
  collective on its contiguous slice, then the epoch bump; the caller's stream waits for the
  communication stream, then the post-reorder runs (in two stages: the rows the early groups
  complete beside the last groups' collectives, the rest after them). Every kernel is loaded and
  every buffer allocated when the plan is built (a wait enqueued before its producer's first launch
  would deadlock on lazy loading); the waits are packed once per plan, and the GEMM's and the
  post-reorder's launches once per set of tensor addresses (:class:`fo_lib.kernels.LaunchMemo`).
  The communication side touches only plan-owned buffers and reads its targets on the device, so it
  is captured once as CUDA graphs (one per post-reorder stage) and replayed by every call
  (``comm_graph=True``): an eager call then costs a few launches on the host instead of two per
  group (a wait kernel and a collective call, ~0.1-0.2 ms each through torch.distributed).
* ``device="cpu"``: the NumPy reference of the same kernels (the GEMM output is scattered group by
  group through the same tables before each group's collective); with gloo this runs the whole
  orchestration in multi-process CI tests.

Output semantics per primitive (``C_r = a_r @ b_r.T`` on rank ``r``, then the fused post-ops):

* ``all_reduce``: ``sum_r C_r`` on every rank, ``[M, N]``.
* ``reduce_scatter``: rank ``k`` gets the rows ``plan.owned_rows`` (block-cyclic, see
  :mod:`fo_lib.reorder`) of ``sum_r C_r``; :meth:`OverlapPlan.all_gather` restores ``[M, N]``.
* ``all_to_all``: rank ``q`` gets row ``i`` of rank ``s`` at row ``dst_index[s][i]`` whenever
  ``dest[s][i] == q`` (MoE combine).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

import numpy as np

from . import counting, postops, reorder
from .partition import validate_partition
from .postops import PostOps, post_reorder_reference

PRIMITIVES = ("all_reduce", "reduce_scatter", "all_to_all")
DEVICES = ("cuda", "cpu")
SCHEDULES = ("persistent", "per_tile")
LAYOUTS = ("tiles", "rows")
REDUCTIONS = ("collective", "post_reorder")


def group_collective(primitive: str, reduction: str = "collective") -> str:
    """The collective each wave group of a plan runs (and whose link curve models it): the
    primitive, or ``"all_gather"`` for an AllReduce reduced by the post-reorder. Other primitives
    have no choice of reduction."""
    return "all_gather" if primitive == "all_reduce" and reduction == "post_reorder" else primitive


def layout_config(config, layout: str):
    """The tile config a layout runs: the rows layout walks a row-major raster (bands of one tile
    row, the finest row cuts); the tiles layout keeps ``config``."""
    return config.with_raster("row", 1) if layout == "rows" else config


class PlanError(ValueError):
    """A plan cannot be built, or a call does not match its plan; nothing was launched."""


class CollectiveError(RuntimeError):
    """A group's collective failed (a peer stalled past the timeout, a link error); the message
    names the plan, the group and the rank, and the communicator's own exception is chained."""


@dataclass(frozen=True)
class Routing:
    """All-to-All routing of every rank: ``dest[s][i]`` is where output row ``i`` of rank ``s`` goes,
    ``dst_index[s][i]`` the row it fills there."""

    dest: tuple
    dst_index: tuple

    @classmethod
    def from_destinations(cls, dest, *, shuffle_seed: int | None = None) -> "Routing":
        """Routing whose receive slots follow (source rank, row) order, optionally shuffled."""
        dest = tuple(np.asarray(d, dtype=np.int64) for d in dest)
        W = len(dest)
        counters = np.zeros(W, dtype=np.int64)
        idx = []
        for d in dest:
            x = np.empty(len(d), dtype=np.int64)
            for q in range(W):
                m = d == q
                x[m] = counters[q] + np.arange(int(m.sum()))
                counters[q] += int(m.sum())
            idx.append(x)
        if shuffle_seed is not None:  # each receiver's slots in a random order
            rng = np.random.default_rng(shuffle_seed)
            perms = [rng.permutation(int(c)) for c in counters]
            idx = [np.array([perms[q][j] for q, j in zip(d, x)], dtype=np.int64) for d, x in zip(dest, idx)]
        return cls(dest, tuple(idx))

    def digest(self) -> str:
        """A short hash of every rank's destinations and slots: equal routings, equal digests."""
        h = hashlib.sha256()
        for arrays in (self.dest, self.dst_index):
            for a in arrays:
                a = np.ascontiguousarray(a, dtype=np.int64)
                h.update(len(a).to_bytes(8, "little"))
                h.update(a.tobytes())
        return h.hexdigest()[:16]


def check_plans_agree(comm, fingerprint: dict) -> None:
    """Raise :class:`PlanError` on every rank unless every rank's plan has this ``fingerprint``.

    One exchange of fixed form (every rank's fingerprint, whatever it holds), so ranks that differ
    still take part in the same collective and all learn the first field that differs. Communicators
    of identical virtual ranks (the loopbacks) have no ``all_gather_object``: nothing can differ."""
    gather = getattr(comm, "all_gather_object", None)
    if gather is None or int(comm.world_size) == 1:
        return
    seen = gather(fingerprint)
    for field, mine in fingerprint.items():
        values = [fp.get(field) for fp in seen]
        if any(v != mine for v in values):
            per_rank = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
            raise PlanError(f"the ranks built different plans: {field} differs ({per_rank}); every rank "
                            f"must build the same plan (rank {comm.rank} raised this)")


def _torch():
    import torch
    return torch


_DTYPES = {"bf16": "bfloat16", "f16": "float16"}


class OverlapPlan:
    """Everything one overlapped GEMM + collective needs, built once and reused.

    ``comm`` is a :class:`fo_lib.comm.Communicator`; its world size and rank define the plan's.
    ``config`` is a :class:`fo_lib.gemm.GemmConfig` (portable) or :class:`fo_lib.gemm_sm90.Sm90Config`
    (Hopper), default :func:`fo_lib.gemm.auto_config` (the Hopper kernel on sm_90 devices);
    ``ctas`` the persistent CTA count (default: SM count minus ``comm_sms``, which defaults to the
    communicator's ``sm_footprint``: with no SM left, the wait kernel and the collective's kernels
    only start after the GEMM and nothing overlaps). ``partition`` groups
    the GEMM's waves (default: the finest partition with at most ``max_groups`` groups; a callable
    ``(M, N, K, waves) -> partition`` is asked once the wave count is known). ``timeout_ms``
    bounds every counter wait: a wait that expires makes the call raise :class:`counting.WaitError`.
    ``comm_graph`` (CUDA only): replay the communication side (waits, collectives) as one CUDA graph
    captured when the plan is built, instead of launching it group by group; off, each group gets an
    NVTX range (``fo group g``) for profilers. A communicator that cannot be captured falls back to
    group-by-group launches with a warning.
    ``schedule``: ``"persistent"`` (default) runs ``ctas`` CTAs that loop over the tiles, so the
    collective's kernels find ``comm_sms`` SMs free for the whole GEMM; ``"per_tile"`` launches one
    CTA per tile, so the GEMM has every SM until a collective starts, whose high-priority CTAs then
    take SMs as GEMM tiles finish (waves are counted over all ``sm_count`` SMs; ``ctas`` and
    ``comm_sms`` do not apply).
    ``layout`` (all_reduce only): ``"tiles"`` (default) stores each group's tiles contiguously
    (:func:`fo_lib.reorder.tile_reorder`) and gathers them back in the post-reorder; ``"rows"``
    (:func:`fo_lib.reorder.row_reorder`) cuts the groups at whole tile-row bands instead, so the
    GEMM stores ``C`` in place (no table) and the groups' collectives work on row ranges of it. The
    default config then walks a row-major raster (``swizzle`` 1: bands of one tile row, the finest
    cuts). With no element-wise op and no ``out``, a call runs no post-reorder at all and returns
    the plan's buffer as ``[M, N]``, which any later call of the plan overwrites (eager or a
    captured replay, whose output is that same buffer); the modules copy it out.
    ``reduction`` (all_reduce, tiles layout): ``"collective"`` (default) sums in the collective
    (``comm.all_reduce`` per group); ``"post_reorder"`` runs an in-place ``comm.all_gather`` per
    group instead, into a buffer of ``W`` copies (:func:`fo_lib.reorder.gather_reorder`), and the
    post-reorder sums the copies (fp32) while it restores the layout. On 2 ranks the link carries
    the same bytes either way, and NCCL runs an AllGather on the copy engines, with no SM, when the
    communicator asks for it (``TorchDistCommunicator(copy_engine=True)``, which also allocates the
    plan's buffer in a symmetric window).
    """

    def __init__(self, primitive: str, M: int, N: int, K: int, comm, *, dtype: str = "bf16",
                 device: str = "cuda", partition=None, config=None, ctas: int | None = None,
                 comm_sms: int | None = None, routing: Routing | None = None, max_groups: int = 8,
                 timeout_ms: float = 10_000.0, sm_count: int | None = None, comm_graph: bool = True,
                 schedule: str = "persistent", layout: str = "tiles", reduction: str = "collective"):
        if primitive not in PRIMITIVES:
            raise PlanError(f"primitive must be one of {PRIMITIVES}, got {primitive!r}")
        if device not in DEVICES:
            raise PlanError(f"device must be one of {DEVICES}, got {device!r}")
        if dtype not in _DTYPES:
            raise PlanError(f"dtype must be one of {tuple(_DTYPES)}, got {dtype!r}")
        for name, v in (("M", M), ("N", N), ("K", K)):
            if not isinstance(v, (int, np.integer)) or v <= 0:
                raise PlanError(f"{name} must be a positive integer, got {v!r}")
        if K % 8:
            raise PlanError(f"K must be a multiple of 8 (16-byte rows for the GEMM's loads), got {K}")
        if not timeout_ms > 0:
            raise PlanError(f"timeout_ms must be positive, got {timeout_ms}")
        if layout not in LAYOUTS:
            raise PlanError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if layout == "rows" and primitive != "all_reduce":
            raise PlanError(f"the rows layout is for all_reduce (whole rows per group), not {primitive}")
        if reduction not in REDUCTIONS:
            raise PlanError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        if reduction == "post_reorder" and (primitive != "all_reduce" or layout != "tiles"):
            raise PlanError(f"reduction='post_reorder' is for all_reduce in the tiles layout, not {primitive} "
                            f"in the {layout} layout")
        if reduction == "post_reorder" and not 1 <= int(comm.world_size) <= postops.MAX_SOURCES:
            raise PlanError(f"reduction='post_reorder' sums at most {postops.MAX_SOURCES} copies, the world has "
                            f"{comm.world_size} ranks")
        if getattr(comm, "copy_engine", False) and reduction != "post_reorder":
            raise PlanError("a copy-engine communicator leaves the GEMM all SMs but one, so only the AllGather of "
                            "reduction='post_reorder' (copy engines, no SM) can run beside it; use NCCL's default "
                            "communicator for this plan")
        self.layout = layout
        self.reduction = reduction
        self.primitive, self.M, self.N, self.K = primitive, int(M), int(N), int(K)
        self.comm, self.device, self.dtype = comm, device, dtype
        self.world_size, self.rank = int(comm.world_size), int(comm.rank)
        self.timeout_ns = int(timeout_ms * 1e6)
        self.comm_graph = bool(comm_graph) and device == "cuda"

        from . import gemm as gemm_mod
        if sm_count is None:
            sm_count = gemm_mod.sm_count() if device == "cuda" else 132
        if config is None:
            config = (gemm_mod.auto_config(self.M, self.N, self.K, sm_count) if device == "cuda"
                      else gemm_mod.default_config(self.M, self.N, self.K, sm_count))
            config = layout_config(config, layout)
        config.validate()
        if layout == "rows" and config.order != "row":
            raise PlanError(f"the rows layout needs a row raster (bands of whole tile rows), got order "
                            f"{config.order!r}")
        self.config = config
        if comm_sms is None:
            # The SMs the communication side needs while the GEMM runs (wait kernels, the collective's
            # own kernels): the communicator's measured/declared footprint.
            comm_sms = getattr(comm, "sm_footprint", 0)
        self.comm_sms = int(comm_sms)
        if schedule not in SCHEDULES:
            raise PlanError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        self.schedule = schedule
        if schedule == "per_tile":
            self.grid = config.grid(self.M, self.N, sm_count)
            self.ctas = self.grid.tiles_m * self.grid.tiles_n
        else:
            self.ctas = int(ctas) if ctas is not None else sm_count - self.comm_sms
            if self.ctas <= 0:
                raise PlanError(f"no CTAs left for the GEMM (SMs {sm_count}, comm_sms {comm_sms})")
            self.grid = config.grid(self.M, self.N, self.ctas)
        T = self.grid.num_waves
        if callable(partition):  # a tuner: (M, N, K, waves) -> partition
            partition = partition(self.M, self.N, self.K, T)
        if partition is None:
            size = -(-T // max_groups)
            partition = (size,) * (T // size) + ((T % size,) if T % size else ())
        self.partition = validate_partition(partition, T)

        # Copies the post-reorder sums per element: W when the collective only gathers.
        self.sources = self.world_size if reduction == "post_reorder" else 1
        if primitive == "all_reduce" and reduction == "post_reorder":
            self.tables = reorder.gather_reorder(self.grid, self.partition, self.world_size, self.rank)
            self.out_rows = self.M
            self.post_table = self.tables.post_table
            self.recv_elements = 0
        elif primitive == "all_reduce":
            self.tables = (reorder.row_reorder if layout == "rows" else reorder.tile_reorder)(self.grid, self.partition)
            self.out_rows = self.M
            self.post_table = self.tables.post_table
            self.recv_elements = 0
        elif primitive == "reduce_scatter":
            self.tables = reorder.subtile_reorder(self.grid, self.partition, self.world_size)
            self.owned_rows = self.tables.owned_rows(self.rank)
            self.out_rows = len(self.owned_rows)
            self.post_table = self.tables.recv_table(self.rank)
            self.recv_elements = self.tables.recv_elements
        else:
            if routing is None:
                raise PlanError("all_to_all needs a Routing (destination and slot of every output row)")
            if len(routing.dest) != self.world_size:
                raise PlanError(f"routing covers {len(routing.dest)} ranks, the communicator has {self.world_size}")
            try:
                self.tables = reorder.subtoken_reorder(self.grid, self.partition, routing.dest,
                                                       routing.dst_index, self.rank)
            except reorder.ReorderError as exc:
                raise PlanError(str(exc)) from None
            self.routing = routing
            self.out_rows = self.tables.out_rows
            self.post_table = self.tables.recv_table
            self.recv_elements = self.tables.recv_elements
        # Before any collective (the warm-up runs them): ranks whose plans differ would run
        # collectives of different sizes or counts, which hangs, aborts or silently mixes data.
        check_plans_agree(comm, self.fingerprint())
        self.group_tiles = [int(v) for v in self.tables.group_tiles]
        self._alloc()

    # --- set-up ----------------------------------------------------------------------------------
    def fingerprint(self) -> dict:
        """Everything that decides the sequence and sizes of the plan's collectives, which every
        rank's plan must share (in the order :func:`check_plans_agree` reports a difference)."""
        routing = getattr(self, "routing", None)
        return {"primitive": self.primitive, "M": self.M, "N": self.N, "K": self.K, "dtype": self.dtype,
                "config": repr(self.config), "schedule": self.schedule, "ctas": self.ctas,
                "partition": tuple(int(p) for p in self.partition), "layout": self.layout,
                "reduction": self.reduction, "routing": None if routing is None else routing.digest()}

    @property
    def num_groups(self) -> int:
        """Groups of a call: one per part of ``partition`` (the rows layout may merge some)."""
        return len(self.tables.group_tiles)

    def _alloc(self) -> None:
        torch = _torch()
        dev = torch.device("cuda", torch.cuda.current_device()) if self.device == "cuda" else torch.device("cpu")
        self._dev = dev
        tdtype = getattr(torch, _DTYPES[self.dtype])
        self._tdtype = tdtype
        buf_elems = self.tables.buffer_elements
        # Zeroed once: padding of tail subtiles is never written but does take part in reductions.
        # A communicator may place it where its collectives run best (NCCL's symmetric windows).
        if self.device == "cuda":
            from .comm import comm_buffer
            self.send = comm_buffer(self.comm, buf_elems, tdtype, dev).zero_()
        else:
            self.send = torch.zeros(buf_elems, dtype=tdtype, device=dev)
        self.recv = (torch.zeros(self.recv_elements, dtype=tdtype, device=dev)
                     if self.primitive != "all_reduce" else None)
        self.slices = self._group_slices()
        self.post_stages = self._post_stages()
        if self.device == "cpu":
            self._cpu_scatter = self._cpu_group_indices()
            return
        self.row_offset = torch.from_numpy(self.tables.row_offset).to(dev)
        # How the GEMM stores: a place per tile where the layout is tile blocks (AllReduce tiles,
        # ReduceScatter subtiles: no row table to read), else the row table (All-to-All), or C
        # row-major (None, None: the rows layout's in-place store).
        from . import gemm
        place = getattr(self.tables, "tile_place", None) if gemm.kernels_for(self.config).place_store else None
        self._tile_place = None if place is None else torch.from_numpy(place).to(dev)
        self._store_table = None if (self.layout == "rows" or self._tile_place is not None) else self.row_offset
        self.tile_group = torch.from_numpy(self.tables.tile_group).to(dev)
        self.post_table_dev = torch.from_numpy(np.ascontiguousarray(self.post_table)).to(dev)
        self.post_stride_dev = (torch.from_numpy(self.tables.peer_stride).to(dev) if self.sources > 1 else None)
        self.counters = torch.zeros(self.num_groups, dtype=torch.int32, device=dev)
        self.epoch_word = torch.zeros(1, dtype=torch.int32, device=dev)  # calls completed, mod 2^32
        self.error = torch.zeros(1, dtype=torch.int32, device=dev)
        self._error_host = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        self._done = torch.cuda.Event()
        # Re-recorded every call: a wait on an event waits for its latest record at enqueue time.
        self._group_done = [torch.cuda.Event() for _ in range(self.num_groups)]
        self._pending_check = False
        self.comm_stream = torch.cuda.Stream(device=dev, priority=-100)  # clamped to the highest priority
        # Every call enqueues the same waits and epoch bump: packed once (a launch then costs a
        # driver call, not the checks and argument packing of counting.wait_epoch).
        self._waits = [counting.wait_epoch_launch(self.counters, g, self.group_tiles[g], self.epoch_word,
                                                  self.error, self.timeout_ns) for g in range(self.num_groups)]
        self._bump_epoch = counting.bump_counter_launch(self.epoch_word, 0, 1)
        reserve = getattr(self.comm, "reserve", None)
        if reserve is not None:
            reserve(self.send.numel() * self.send.element_size())
        self._warm_up()

    def _group_slices(self) -> list[dict]:
        """Per group, the buffer slices and counts its collective works on."""
        t, out = self.tables, []
        for g in range(self.num_groups):
            if self.sources > 1:  # in-place AllGather: this rank's copy inside the group's W copies
                out.append(dict(send=tuple(int(v) for v in t.own_slices[g]),
                                recv=tuple(int(v) for v in t.group_slices[g])))
            elif self.primitive == "all_reduce":
                s, e = (int(v) for v in t.group_slices[g])
                out.append(dict(send=(s, e)))
            elif self.primitive == "reduce_scatter":
                s, e = (int(v) for v in t.group_slices[g])
                r0 = int(t.recv_start[g])
                out.append(dict(send=(s, e), recv=(r0, r0 + int(t.chunk_elements[g]))))
            else:
                s0 = int(t.send_offsets[g, 0])
                r0 = int(t.recv_offsets[g, 0])
                out.append(dict(send=(s0, s0 + int(t.send_counts[g].sum())),
                                recv=(r0, r0 + int(t.recv_counts[g].sum())),
                                send_counts=t.send_counts[g].tolist(), recv_counts=t.recv_counts[g].tolist()))
        return out

    def _post_stages(self) -> tuple[tuple[int, int, int], ...]:
        """``(group, first row, end row)`` per stage of the staged post-reorder: the output rows whose
        every source element lies in the buffer regions of groups ``<= group``, so that they can be
        restored as soon as that group's collective has finished, while later groups still
        communicate. Rows stay in order (whole rows: RMSNorm needs them) and the last stage ends
        at the last row."""
        key = "recv" if "recv" in self.slices[0] else "send"  # where each collective leaves its result
        spans = [(g, *self.slices[g][key]) for g in range(self.num_groups)]
        spans = sorted((lo, hi, g) for g, lo, hi in spans if hi > lo)
        starts = np.array([lo for lo, _, _ in spans], dtype=np.int64)
        table = np.asarray(self.post_table, dtype=np.int64)
        if table.size == 0:  # no rows (an All-to-All rank that receives nothing): one empty stage
            return ((self.num_groups - 1, 0, 0),)
        pos = np.searchsorted(starts, table, side="right") - 1
        if (pos < 0).any() or (table >= np.array([hi for _, hi, _ in spans])[pos]).any():
            raise PlanError("the post-reorder table reads outside every group's buffer region")
        group = np.array([g for _, _, g in spans], dtype=np.int64)[pos]
        ready = np.maximum.accumulate(group.max(axis=1))  # rows in order: a stage is a row prefix
        # Two stages at most: the rows every group but the last completes, then the rest. A stage
        # shares the caller's stream, so none starts before the GEMM ends; by then the early groups'
        # rows are all ready (measured on 2 H200s: eight stages of 1024 rows after the GEMM cost
        # 0.15 ms where one launch took 0.08 ms), and what matters is that only the last group's
        # rows wait for the last collective.
        early = int(np.searchsorted(ready, self.num_groups - 2, side="right")) if self.num_groups > 1 else 0
        if early in (0, len(ready)):
            return ((int(ready[-1]), 0, len(ready)),)
        return ((int(ready[early - 1]), 0, early), (int(ready[-1]), early, len(ready)))

    def _cpu_group_indices(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """CPU executor: per group, (positions in C.flat, positions in the send buffer)."""
        idx = reorder.element_index(self.tables.row_offset, self.N, self.grid.BN)
        tile = (np.arange(self.M)[:, None] // self.grid.BM) * self.grid.tiles_n + np.arange(self.N)[None, :] // self.grid.BN
        group = self.tables.tile_group[tile]
        torch = _torch()
        flat = np.arange(self.M * self.N).reshape(self.M, self.N)
        return [(torch.from_numpy(flat[group == g]), torch.from_numpy(idx[group == g]))
                for g in range(self.num_groups)]

    def _warm_up(self) -> None:
        """Load every kernel of a call (GEMM, wait, post-reorder, the collective path) before any wait
        is enqueued behind a producer, then reset the counting table."""
        torch = _torch()
        from . import gemm
        a = torch.zeros(self.M, self.K, dtype=self._tdtype, device=self._dev)
        b = torch.zeros(self.N, self.K, dtype=self._tdtype, device=self._dev)
        gemm.kernels_for(self.config).gemm_nt_signal(a, b, self.send, self._store_table, self.tile_group,
                                                     self.counters, config=self.config, ctas=self.ctas,
                                                     tile_place=self._tile_place)
        self.epoch_word.fill_(-1)  # epoch 2^32 - 1: the next target is 0, so these waits pass at once
        counting.wait_epoch(self.counters, 0, 1, self.epoch_word, self.error, self.timeout_ns)
        src = self.send if self.primitive == "all_reduce" else self.recv
        postops.post_reorder(src, self.post_table_dev, (self.out_rows, self.N), self.grid.BN,
                             sources=self.sources, peer_stride=self.post_stride_dev)
        self._collectives(torch.cuda.current_stream(self._dev), wait=False)
        torch.cuda.synchronize(self._dev)
        self.counters.zero_()
        self.epoch_word.zero_()
        self.send.zero_()
        torch.cuda.synchronize(self._dev)
        self._comm_graph = self._capture_comm_side() if self.comm_graph else None

    def _comm_segments(self) -> list[range]:
        """The groups of each captured communication graph: split where the staged post-reorder's
        first stage may start (:meth:`_post_stages`), so an eager call restores the early rows
        beside the last groups' collectives, as a group-by-group call does."""
        if len(self.post_stages) < 2:
            return [range(self.num_groups)]
        cut = self.post_stages[0][0] + 1
        return [range(cut), range(cut, self.num_groups)]

    def _capture_comm_side(self):
        """The communication side of a call (every group's wait and collective, the epoch bump) as
        CUDA graphs on the communication stream, ``[(graph, its groups)]`` per
        :meth:`_comm_segments`; None (and a warning) if the link cannot be captured."""
        torch = _torch()
        graphs = []
        try:
            for groups in self._comm_segments():
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=self.comm_stream):
                    self._collectives(self.comm_stream, wait=True, groups=groups)
                graphs.append((graph, groups))
        except Exception as exc:  # noqa: BLE001 - e.g. a communicator that synchronizes the host
            import warnings
            warnings.warn(f"the communication side of {self.describe()} could not be captured as a CUDA "
                          f"graph ({type(exc).__name__}: {exc}); launching it group by group", stacklevel=3)
            torch.cuda.synchronize(self._dev)
            return None
        torch.cuda.synchronize(self._dev)
        return graphs

    # --- a call ----------------------------------------------------------------------------------
    def _check_inputs(self, a, b) -> None:
        torch = _torch()
        for t, name, shape in ((a, "a", (self.M, self.K)), (b, "b", (self.N, self.K))):
            if not isinstance(t, torch.Tensor):
                raise PlanError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if tuple(t.shape) != shape:
                raise PlanError(f"{name} must have shape {shape} for this plan, got {tuple(t.shape)}")
            if t.dtype != self._tdtype:
                raise PlanError(f"{name} must be {self._tdtype} for this plan, got {t.dtype}")
            if t.device.type != self._dev.type or (self._dev.type == "cuda" and t.device != self._dev):
                raise PlanError(f"{name} is on {t.device}, the plan on {self._dev}")
            if not t.is_contiguous():
                raise PlanError(f"{name} must be contiguous")

    def _collectives(self, stream, *, wait: bool, events: list | None = None, done: dict | None = None,
                     groups: range | None = None) -> None:
        """Every group's collective (``groups``: a range of them), each behind its wait (``wait``); on
        CUDA the epoch bump after the last group. ``events``: a list that receives, per group, CUDA
        events recorded when its wait returned and when its collective finished (the measured
        timeline of :meth:`timed_run`); ``done``: a dict that receives, per group, an event recorded
        when its collective finished."""
        torch = _torch()
        ctx = torch.cuda.stream(stream) if self.device == "cuda" else _nullcontext()
        groups = range(self.num_groups) if groups is None else groups
        with ctx:
            for g in groups:
                sl = self.slices[g]
                if self.device == "cuda":
                    torch.cuda.nvtx.range_push(f"fo group {g}")
                    if wait:
                        self._waits[g](stream)
                elif wait:
                    src, dst = self._cpu_scatter[g]
                    self.send[dst] = self._c_flat[src]
                ready = _record(stream) if events is not None else None
                self._collective(g, sl)
                if events is not None:
                    events.append((ready, _record(stream)))
                if done is not None:
                    if events is not None:
                        done[g] = events[-1][1]
                    else:
                        self._group_done[g].record(stream)
                        done[g] = self._group_done[g]
                if self.device == "cuda":
                    torch.cuda.nvtx.range_pop()
            if self.device == "cuda" and wait and groups[-1] == self.num_groups - 1:
                self._bump_epoch(stream)

    def _collective(self, g: int, sl: dict) -> None:
        """Group ``g``'s collective on its slices; a failure becomes a :class:`CollectiveError`."""
        s, e = sl["send"]
        # Only the CPU executor's collectives block the host: bound them by the plan's timeout (on
        # CUDA they are enqueued behind the counter waits, which carry it).
        kw = {"timeout_s": self.timeout_ns / 1e9} if self.device == "cpu" else {}
        try:
            if self.sources > 1:
                r0, r1 = sl["recv"]
                self.comm.all_gather(self.send[s:e], self.send[r0:r1], **kw)
            elif self.primitive == "all_reduce":
                self.comm.all_reduce(self.send[s:e], **kw)
            elif self.primitive == "reduce_scatter":
                r0, r1 = sl["recv"]
                self.comm.reduce_scatter(self.send[s:e], self.recv[r0:r1], **kw)
            else:
                r0, r1 = sl["recv"]
                self.comm.all_to_all(self.send[s:e], sl["send_counts"], self.recv[r0:r1], sl["recv_counts"], **kw)
        except Exception as exc:
            name = group_collective(self.primitive, self.reduction)
            first = (str(exc).strip().splitlines() or [""])[0]
            raise CollectiveError(
                f"rank {self.rank} of {self.world_size}: the {name} of group {g + 1} of {self.num_groups} "
                f"({e - s} elements) failed in the plan {self.primitive} {self.M}x{self.N}x{self.K} "
                f"{self.dtype} partition {list(self.partition)} ({self.comm.link}, timeout "
                f"{self.timeout_ns / 1e9:g} s): {type(exc).__name__}: {first}") from exc

    def check(self, block: bool = True) -> None:
        """Raise :class:`counting.WaitError` if a previous call's wait timed out (``block=False``: only
        if that call has finished)."""
        if self.device != "cuda" or not self._pending_check:
            return
        if not block and not self._done.query():
            return
        self._done.synchronize()
        self._pending_check = False
        if int(self._error_host[0]):
            raise counting.WaitError(int(self._error_host[0]) - 1)

    def reset(self) -> None:
        """Clear the counting table, the error word and the epoch (after a failed wait)."""
        if self.device != "cuda":
            return
        _torch().cuda.synchronize(self._dev)
        self.counters.zero_()
        self.error.zero_()
        self.epoch_word.zero_()
        self._pending_check = False
        _torch().cuda.synchronize(self._dev)

    @property
    def comm_graph_active(self) -> bool:
        """Whether calls replay the captured communication graph (False with ``comm_graph=False``, on
        the CPU, or when the link could not be captured)."""
        return getattr(self, "_comm_graph", None) is not None

    @property
    def epoch(self) -> int:
        """Calls completed since the plan was built or reset (mod 2^32; synchronizes the device)."""
        if self.device != "cuda":
            return 0
        _torch().cuda.synchronize(self._dev)
        return int(self.epoch_word.item()) & 0xFFFFFFFF

    def run(self, a, b, *, ops: PostOps = PostOps(), bias=None, residual=None, residual_out=None,
            weight=None, out=None):
        """One overlapped call: ``a`` [M, K], ``b`` [N, K] (nn.Linear weight); returns the post-reordered
        output (``[M, N]``, or this rank's rows for reduce_scatter / all_to_all)."""
        self._check_inputs(a, b)
        if self.device == "cpu":
            return self._run_cpu(a, b, ops, bias, residual, residual_out, weight)
        self.check(block=False)
        try:
            return self._enqueue(a, b, ops, bias=bias, residual=residual, residual_out=residual_out,
                                 weight=weight, out=out)
        finally:
            self._mark_pending()

    def _enqueue(self, a, b, ops, *, replay_comm: bool = True, events: dict | None = None, **operands):
        """GEMM on the caller's stream, the groups' waits and collectives on the communication stream
        (the captured communication graph when there is one and ``replay_comm``), the post-reorder
        back on the caller's stream (which ends up waiting for everything). ``events``: a dict that
        receives the CUDA events of :meth:`timed_run` (group by group, no graph).

        The post-reorder is staged: each stage of :attr:`post_stages` restores its rows as soon as
        its group's collective is done, beside the later groups' collectives, so only the last stage
        follows the last collective. (The communication graph is captured in one piece per stage,
        :meth:`_comm_segments`, with an event recorded after each replay.)"""
        torch = _torch()
        from . import gemm
        compute = torch.cuda.current_stream(self._dev)
        replay = events is None and replay_comm and self.comm_graph_active
        stages = self.post_stages
        self._check_post_operands(operands)
        # The communication stream may reuse the receive buffer only after the caller's stream has
        # consumed the previous call's output.
        self.comm_stream.wait_stream(compute)
        if events is not None:
            events["gemm_start"] = _record(compute)
        gemm.kernels_for(self.config).gemm_nt_signal(a, b, self.send, self._store_table, self.tile_group,
                                                     self.counters, config=self.config, ctas=self.ctas, stream=compute,
                                                     tile_place=self._tile_place)
        done: dict = {}
        if events is not None:
            events["gemm_end"] = _record(compute)
            events["groups"], events["post"] = [], []
            self._collectives(self.comm_stream, wait=True, events=events["groups"], done=done)
        elif replay:
            with torch.cuda.stream(self.comm_stream):
                for graph, groups in self._comm_graph:
                    graph.replay()
                    event = self._group_done[groups[-1]]
                    event.record(self.comm_stream)
                    done.update(dict.fromkeys(groups, event))
        else:
            self._collectives(self.comm_stream, wait=True, done=done)
        # NOTES: built after the GEMM and the collectives are enqueued, so the GPU starts on them
        # while the host builds and checks the post-reorder (a new output tensor misses the launch
        # memo: ~40 us per stage; built first, that host time preceded the GEMM and cost the
        # loopback sweep ~0.04 of overlap efficiency, docs/perf-log.md, session 7).
        try:
            launches, result = self._post_launches(ops, stages, operands) if not self._in_place(ops, operands) \
                else ([], self.send.view(self.M, self.N))
            for g, launch in launches:
                compute.wait_event(done[g])
                start = _record(compute) if events is not None else None
                launch(compute)
                if events is not None:
                    events["post"].append((g, start, _record(compute)))
        finally:
            # After the epoch bump (this also joins the streams under capture). Also when a bad
            # operand raised above: the call's waits and collectives ran, so the streams are joined
            # and the error word copied as for a completed call (run() marks it pending either way).
            compute.wait_stream(self.comm_stream)
            self._error_host.copy_(self.error, non_blocking=True)
        return result

    def _in_place(self, ops, operands) -> bool:
        """The rows layout with nothing to apply: the buffer already is the output."""
        return (self.layout == "rows" and ops.is_identity
                and all(operands.get(k) is None for k in ("bias", "residual", "residual_out", "weight", "out")))

    def _check_post_operands(self, operands) -> None:
        """The post-reorder operands' names and row shapes (stages slice them by rows)."""
        torch = _torch()
        unknown = set(operands) - {"bias", "residual", "residual_out", "weight", "out"}
        if unknown:
            raise PlanError(f"unknown post-reorder operands {sorted(unknown)}")
        for k in ("residual", "residual_out", "out"):
            t = operands.get(k)
            if t is not None and (not isinstance(t, torch.Tensor) or tuple(t.shape) != (self.out_rows, self.N)):
                got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise PlanError(f"{k} must be a [{self.out_rows}, {self.N}] tensor, got {got}")

    def _post_launches(self, ops, stages, operands) -> tuple[list, object]:
        """Post-reorder launches ``[(group, launch)]``, one per stage ``(group, r0, r1)`` (rows
        ``r0:r1`` of the output and of the row operands), and the output tensor."""
        torch = _torch()
        rows = {k: operands.get(k) for k in ("residual", "residual_out", "out")}
        if rows["out"] is None and len(stages) > 1:
            rows["out"] = torch.empty((self.out_rows, self.N), dtype=self._tdtype, device=self._dev)
        src = self.send if self.primitive == "all_reduce" else self.recv
        launches = []
        for g, r0, r1 in stages:
            part = {k: (None if t is None else t[r0:r1]) for k, t in rows.items()}
            stride = None if self.post_stride_dev is None else self.post_stride_dev[r0:r1]
            launches.append((g, postops.post_reorder_launcher(
                src, self.post_table_dev[r0:r1], (r1 - r0, self.N), self.grid.BN, ops, bias=operands.get("bias"),
                weight=operands.get("weight"), sources=self.sources, peer_stride=stride, **part)))
        out = rows["out"] if rows["out"] is not None else launches[0][1].out
        return launches, out

    def timed_run(self, a, b, *, ops: PostOps = PostOps(), gate_ms: float = 20.0, **operands):
        """One call with its measured timeline: ``(output, rows)``, one row per span in ms from the
        GEMM's start: ``gemm`` (start to last tile), per group ``group`` (from its wait's return, i.e.
        its tiles done and the previous collective finished, to its collective's end), per stage of
        the staged post-reorder ``post`` (``group``: the collective it waited for). The groups run
        one by one with CUDA events between them (no captured graph), and the call synchronizes.

        The whole call is enqueued behind a GPU sleep of ``gate_ms`` (the gate), so the timeline is
        the device's: without it, a span would also hold the host's time to launch what follows it
        (about 0.1 ms per group). A gate that opens before the host has enqueued everything raises."""
        if self.device != "cuda":
            raise PlanError("timed_run measures CUDA events: it needs device='cuda'")
        if not gate_ms > 0:
            raise PlanError(f"gate_ms must be > 0, got {gate_ms}")
        self._check_inputs(a, b)
        torch = _torch()
        self.check()
        torch.cuda.synchronize(self._dev)
        host_start = time.perf_counter()
        gate_start = _record(torch.cuda.current_stream(self._dev))
        from .testing import SLEEP_CYCLES_PER_MS
        torch.cuda._sleep(int(gate_ms * SLEEP_CYCLES_PER_MS))
        events: dict = {}
        out = self._enqueue(a, b, ops, events=events, **operands)
        host_ms = (time.perf_counter() - host_start) * 1e3
        self._mark_pending()
        torch.cuda.synchronize(self._dev)
        self.check()
        t0 = events["gemm_start"]
        gate = gate_start.elapsed_time(t0)
        if gate <= host_ms:
            raise PlanError(f"timed_run: the gate opened after {gate:.2f} ms but enqueueing the call took "
                            f"{host_ms:.2f} ms, so host time would show in the timeline; raise gate_ms")
        rows = [dict(span="gemm", group=-1, start_ms=0.0, end_ms=t0.elapsed_time(events["gemm_end"]))]
        for g, (ready, done) in enumerate(events["groups"]):
            rows.append(dict(span="group", group=g, start_ms=t0.elapsed_time(ready), end_ms=t0.elapsed_time(done)))
        for g, start, end in events["post"]:
            rows.append(dict(span="post", group=g, start_ms=t0.elapsed_time(start), end_ms=t0.elapsed_time(end)))
        return out, rows

    def _mark_pending(self) -> None:
        self._done.record(_torch().cuda.current_stream(self._dev))
        self._pending_check = True

    def capture(self, a, b, *, ops: PostOps = PostOps(), **operands) -> "GraphedCall":
        """Capture one whole call (GEMM, every wait and collective, post-reorder) in a CUDA graph.

        ``a``, ``b`` and the operands become static: each replay computes on whatever they hold then
        and writes the same output tensor. Host work per call drops to one graph launch. Waits read
        their targets from the plan's device epoch, so replays and eager calls interleave freely.
        """
        if self.device != "cuda":
            raise PlanError("CUDA-graph capture needs device='cuda'")
        self._check_inputs(a, b)
        torch = _torch()
        self.check()
        torch.cuda.synchronize(self._dev)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            output = self._enqueue(a, b, ops, replay_comm=False, **operands)
        torch.cuda.synchronize(self._dev)
        return GraphedCall(self, graph, output)

    def _run_cpu(self, a, b, ops, bias, residual, residual_out, weight):
        torch = _torch()
        c = (a.float() @ b.float().T).to(self._tdtype)
        self._c_flat = c.reshape(-1)
        self._collectives(None, wait=True)
        src = self.send if self.primitive == "all_reduce" else self.recv
        np_ = (lambda t: None if t is None else t.double().numpy())
        res_out = None if residual_out is None else np.empty((self.out_rows, self.N))
        stride = self.tables.peer_stride if self.sources > 1 else None
        y = post_reorder_reference(src.double().numpy(), self.post_table, (self.out_rows, self.N), self.grid.BN,
                                   ops, bias=np_(bias), residual=np_(residual), residual_out=res_out,
                                   weight=np_(weight), sources=self.sources, peer_stride=stride)
        if residual_out is not None:
            residual_out.copy_(torch.from_numpy(res_out))
        return torch.from_numpy(y).to(self._tdtype)

    # --- ReduceScatter's AllGather side ------------------------------------------------------------
    def all_gather(self, local, ops: PostOps = PostOps(), **operands):
        """AllGather of a reduce_scatter plan's per-rank rows, restored to global row order ``[M, N]``
        by the block-cyclic permutation fused into the post step."""
        if self.primitive != "reduce_scatter":
            raise PlanError("all_gather restores the rows of a reduce_scatter plan")
        torch = _torch()
        if tuple(local.shape) != (self.out_rows, self.N):
            raise PlanError(f"local must be this rank's {(self.out_rows, self.N)} rows, got {tuple(local.shape)}")
        R = self.tables.max_rows
        padded = torch.zeros(R * self.N, dtype=local.dtype, device=local.device)
        padded[:local.numel()] = local.reshape(-1)
        gathered = torch.empty(self.world_size * R * self.N, dtype=local.dtype, device=local.device)
        self.comm.all_gather(padded, gathered)
        table = self.tables.allgather_table()
        if self.device == "cpu":
            np_ = {k: (None if v is None else v.double().numpy()) for k, v in operands.items()}
            y = post_reorder_reference(gathered.double().numpy(), table, (self.M, self.N), self.grid.BN, ops, **np_)
            return torch.from_numpy(y).to(local.dtype)
        if not hasattr(self, "_ag_table"):
            self._ag_table = torch.from_numpy(table).to(self._dev)
        return postops.post_reorder(gathered, self._ag_table, (self.M, self.N), self.grid.BN, ops, **operands)

    def describe(self) -> str:
        """One paragraph: what the plan computes, how it is cut, and whether anything overlaps."""
        groups = ("" if self.layout == "tiles" else
                  f", layout rows (row cuts {self.tables.row_cuts.tolist()})")
        if self.sources > 1:
            groups += ", reduced in the post-reorder (AllGather per group)"
        if self.num_groups == 1:
            groups += ("; one group: its collective starts only after the whole GEMM, so nothing overlaps "
                       f"({self.grid.num_waves} wave(s) of {self.ctas} CTAs; fewer SMs (sm_count=), "
                       "more tiles or a finer partition give more groups)")
        return (f"{self.primitive} {self.M}x{self.N}x{self.K} {self.dtype} on {self.device}, world "
                f"{self.world_size} ({self.comm.link}), {self.grid.describe()}, partition {list(self.partition)}"
                + groups)

    def __repr__(self) -> str:
        return f"OverlapPlan({self.describe()})"


class GraphedCall:
    """A captured :meth:`OverlapPlan.run`; calling it replays the graph and returns its output tensor
    (the same tensor on every call: copy it if a later replay must not overwrite it)."""

    def __init__(self, plan: OverlapPlan, graph, output):
        self.plan, self.graph, self.output = plan, graph, output

    def __call__(self):
        self.plan.check(block=False)
        self.graph.replay()
        self.plan._mark_pending()
        return self.output


def _record(stream):
    """A timing event recorded on ``stream`` now."""
    ev = _torch().cuda.Event(enable_timing=True)
    ev.record(stream)
    return ev


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
