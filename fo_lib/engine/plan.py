"""The overlapped op as a plan: validated and built once per (primitive, shape, dtype, world, link,
partition), then run many times. The plan chooses the config, the tile grid and the partition,
asks its :mod:`buffer layout <fo_lib.engine.layouts>` for the tables and slices, checks that every
rank built the same plan, and hands calls to an executor (CUDA streams or the CPU reference)."""
from __future__ import annotations

import contextlib

from .. import gemm
from .._util import ceil_div
from .tuned import plan_partition
from ..postops import PostOps
from .call_check import CallCheck
from .errors import CollectiveError, PlanError, check_plans_agree
from .layouts import layout_config
from .validation import (DTYPES, check_comm, check_operands, check_partition,
                         check_post_operands, check_tensor, validate_arguments)


def _from_layout(name: str, doc: str) -> property:
    return property(lambda plan: getattr(plan.buffer_layout, name), doc=doc)


def describe_plan(plan) -> str:
    """One paragraph: what the plan computes, how it is cut, and whether anything overlaps."""
    text = (f"{plan.primitive} {plan.M}x{plan.N}x{plan.K} {plan.dtype} on {plan.device}, world "
            f"{plan.world_size} ({plan.comm.link}), {plan.grid.describe()}, partition {list(plan.partition)}"
            + plan.buffer_layout.describe())
    if plan.num_groups == 1:
        text += ("; one group: its collective starts only after the whole GEMM, so nothing overlaps "
                 f"({plan.grid.num_waves} wave(s) of {plan.ctas} CTAs; fewer SMs (sm_count=), more tiles "
                 "or a finer partition give more groups)")
    return text


class OverlapPlan:
    """Everything one overlapped GEMM + collective needs, built once and reused.

    ``comm`` is a :class:`fo_lib.comm.Communicator`; its world size and rank define the plan's.
    ``config`` is a :class:`fo_lib.gemm.GemmConfig` (portable) or :class:`fo_lib.gemm.sm90.Sm90Config`
    (Hopper), default :func:`fo_lib.gemm.auto_config` (the Hopper kernel on sm_90 devices);
    ``ctas`` the persistent CTA count (default: SM count minus ``comm_sms``, which defaults to the
    communicator's ``sm_footprint``: with no SM left, the wait kernel and the collective's kernels
    only start after the GEMM and nothing overlaps). ``sm_count``: the SMs waves are counted over
    (default: the GPU's; 132 on the CPU). ``partition`` groups the GEMM's waves (default: the finest
    partition with at most ``max_groups`` groups; a callable ``(M, N, K, waves) -> partition`` is
    asked once the wave count is known; ``"tuned"``: :func:`fo_lib.engine.tuned.plan_partition`).
    ``timeout_ms`` bounds every wait of a call: on CUDA each counter wait (an expired one makes the
    call raise :class:`fo_lib.counting.WaitError`), on the CPU each collective's wait for its peers
    (:class:`CollectiveError`); at most 10^9 (about 11.6 days).
    ``comm_graph`` (CUDA only): replay the communication side (waits, collectives) as CUDA graphs
    captured when the plan is built, instead of launching it group by group; off, each group gets an
    NVTX range (``fo group g``) for profilers. A communicator that cannot be captured falls back to
    group-by-group launches with a warning.
    ``schedule``: ``"persistent"`` (default) runs ``ctas`` CTAs that loop over the tiles, so the
    collective's kernels find ``comm_sms`` SMs free for the whole GEMM; ``"per_tile"`` launches one
    CTA per tile, so the GEMM has every SM until a collective starts, whose high-priority CTAs then
    take SMs as GEMM tiles finish (waves are counted over all ``sm_count`` SMs; ``ctas`` and
    ``comm_sms`` do not apply).
    ``layout`` (all_reduce only): ``"tiles"`` (default) stores each group's tiles contiguously and
    gathers them back in the post-reorder; ``"rows"`` cuts the groups at whole tile-row bands, so the
    GEMM stores ``C`` in place and the groups' collectives work on row ranges of it (the default
    config then walks a row-major raster). With no element-wise op and no ``out``, a call runs no
    post-reorder at all and returns the plan's buffer as ``[M, N]``, which any later call of the
    plan overwrites; the modules copy it out.
    ``reduction`` (all_reduce or reduce_scatter, tiles layout): ``"collective"`` (default) sums in
    the collective; ``"post_reorder"`` only moves data and the post-reorder sums the ``W`` copies
    (fp32) while it restores the layout: an in-place AllGather per group (all_reduce), or an
    All-to-All per group that sends each rank its chunk of every other rank's partial sums
    (reduce_scatter; the link carries what a ReduceScatter's ring does). NCCL runs AllGather (and
    All-to-All of equal chunks) on the copy engines, with no SM, when the communicator asks for it
    (``TorchDistCommunicator(copy_engine=True)``).

    Before the plan's first collective every rank checks that every other rank built the same plan
    (:meth:`fingerprint`); a difference, or a rank whose build failed, raises on every rank. Every
    CPU call then checks with one all_gather of four int64 (:mod:`.call_check`) that all ranks call
    the same plan after as many calls and accepted their inputs, else every rank raises a
    :class:`PlanError` naming each rank's plan; it costs about 0.4 ms a call (gloo, 2 ranks on one
    host, 192x128x16: 1.7 ms a call against 1.3 ms without; within the noise of a 216 ms call at
    1024x4096x1024). CUDA calls are not checked (the check would stall the host on every call). A
    rejected input changes nothing: the plan stays usable. A collective that fails raises
    :class:`CollectiveError`, after which the plan refuses every call; a stalled or dead peer makes
    every other rank raise within ``timeout_ms`` plus about 0.1 s (2 s allowed on a loaded host),
    also at build, where the fingerprint exchange waits at most ``timeout_ms``.
    """

    def __init__(self, primitive: str, M: int, N: int, K: int, comm, *, dtype: str = "bf16",
                 device: str = "cuda", partition=None, config=None, ctas: int | None = None,
                 comm_sms: int | None = None, routing=None, max_groups: int = 8,
                 timeout_ms: float = 10_000.0, sm_count: int | None = None, comm_graph: bool = True,
                 schedule: str = "persistent", layout: str = "tiles", reduction: str = "collective"):
        check_comm(comm)  # without a valid communicator there is no peer to tell
        try:
            self._build(primitive, M, N, K, comm, dtype=dtype, device=device, partition=partition, config=config,
                        ctas=ctas, comm_sms=comm_sms, routing=routing, max_groups=max_groups,
                        timeout_ms=timeout_ms, sm_count=sm_count, comm_graph=comm_graph, schedule=schedule,
                        layout=layout, reduction=reduction)
        except Exception as exc:
            check_plans_agree(comm, error=exc)  # the other ranks learn why, instead of waiting for us
            raise
        # Before any collective (the CUDA warm-up runs them): ranks whose plans differ would run
        # collectives of different sizes or counts, which hangs, aborts or silently mixes data.
        check_plans_agree(comm, self.fingerprint(), timeout_s=self.timeout_ns / 1e9)
        self._broken = None  # set by a failed collective: the group's state is then unknown
        import torch

        self.torch_dtype = getattr(torch, DTYPES[dtype])
        self._call_check = CallCheck(self)
        if device == "cuda":
            from .cuda_executor import CudaExecutor
            self.executor = CudaExecutor(self)
        else:
            from .cpu_executor import CpuExecutor
            self.executor = CpuExecutor(self)
        self.send, self.recv = self.executor.send, self.executor.recv

    def _build(self, primitive, M, N, K, comm, *, dtype, device, partition, config, ctas, comm_sms, routing,
               max_groups, timeout_ms, sm_count, comm_graph, schedule, layout, reduction) -> None:
        """Validate the arguments and build everything up to the executor (no collective)."""
        layout_cls = validate_arguments(primitive, M, N, K, comm, dtype=dtype, device=device, timeout_ms=timeout_ms,
                                        schedule=schedule, layout=layout, reduction=reduction, config=config,
                                        ctas=ctas, comm_sms=comm_sms, max_groups=max_groups, sm_count=sm_count,
                                        comm_graph=comm_graph, routing=routing)
        self.primitive, self.M, self.N, self.K = primitive, int(M), int(N), int(K)
        self.layout, self.reduction, self.schedule = layout, reduction, schedule
        self.comm, self.device, self.dtype = comm, device, dtype
        self.world_size, self.rank = int(comm.world_size), int(comm.rank)
        self.timeout_ns = int(timeout_ms * 1e6)
        self.comm_graph = bool(comm_graph) and device == "cuda"
        if sm_count is None:
            sm_count = gemm.sm_count() if device == "cuda" else 132
        self.config = self._choose_config(config, sm_count)
        # The SMs the communication side needs while the GEMM runs (wait kernels, the collective's
        # own kernels): the communicator's measured/declared footprint.
        self.comm_sms = int(getattr(comm, "sm_footprint", 0) if comm_sms is None else comm_sms)
        if schedule == "per_tile":
            self.grid = self.config.grid(self.M, self.N, sm_count)
            self.ctas = self.grid.tiles_m * self.grid.tiles_n
            self.config = self.config.for_ctas(self.ctas)  # same tiles: the grid holds
        else:
            self.ctas = int(ctas) if ctas is not None else sm_count - self.comm_sms
            if self.ctas <= 0:
                raise PlanError(f"no CTAs left for the GEMM (SMs {sm_count}, comm_sms {self.comm_sms})")
            self.config = self.config.for_ctas(self.ctas)
            self.grid = self.config.grid(self.M, self.N, self.ctas)
        self.partition = self._choose_partition(partition, max_groups)
        extra = {"routing": routing} if primitive == "all_to_all" else {}
        self.buffer_layout = layout_cls(self.grid, self.partition, self.world_size, self.rank, **extra)
        self.slices = self.buffer_layout.slices()
        self.post_stages = self.buffer_layout.post_stages(self.slices)

    def _choose_config(self, config, sm_count: int):
        if config is None:
            pick = gemm.auto_config if self.device == "cuda" else gemm.default_config
            config = layout_config(pick(self.M, self.N, self.K, sm_count), self.layout)
        # The wave groups and the overlap model count whole waves of whole tiles: no stream-K tail.
        config = config.whole_waves()
        config.validate()
        if self.layout == "rows" and config.order != "row":
            raise PlanError(f"the rows layout needs a row raster (bands of whole tile rows), got order "
                            f"{config.order!r}")
        return config

    def _choose_partition(self, partition, max_groups: int) -> tuple[int, ...]:
        T = self.grid.num_waves
        if isinstance(partition, str) and partition == "tuned":
            partition = plan_partition(self, T)
        if callable(partition):  # a tuner: (M, N, K, waves) -> partition
            partition = partition(self.M, self.N, self.K, T)
        if partition is None:
            size = ceil_div(T, max_groups)
            partition = (size,) * (T // size) + ((T % size,) if T % size else ())
        return check_partition(partition, T)

    # --- what the layout decided ---------------------------------------------------------------------
    @property
    def tables(self):
        """The reorder tables (:mod:`fo_lib.reorder`) of the plan's buffer layout."""
        return self.buffer_layout.tables

    @property
    def num_groups(self) -> int:
        return self.buffer_layout.num_groups

    @property
    def group_tiles(self) -> list[int]:
        return [int(v) for v in self.tables.group_tiles]

    # What the buffer layout decided, read through the plan.
    out_rows = _from_layout("out_rows", "Rows of a call's output on this rank.")
    post_table = _from_layout("post_table", "The post-reorder's gather table on this rank.")
    recv_elements = _from_layout("recv_elements", "Elements of the receive buffer (0: in place).")
    sources = _from_layout("sources", "Copies the post-reorder sums per element: W when the collective only gathers.")
    owned_rows = _from_layout("owned_rows", "reduce_scatter: the rows of the sum this rank gets (block-cyclic).")
    routing = _from_layout("routing", "all_to_all: the routing the plan was built for.")

    def fingerprint(self) -> dict:
        """Everything that decides the sequence and sizes of the plan's collectives, which every
        rank's plan must share (in the order :func:`check_plans_agree` reports a difference)."""
        routing = getattr(self.buffer_layout, "routing", None)
        return {"primitive": self.primitive, "M": self.M, "N": self.N, "K": self.K, "dtype": self.dtype,
                "config": repr(self.config), "schedule": self.schedule, "ctas": self.ctas,
                "partition": tuple(int(p) for p in self.partition), "layout": self.layout,
                "reduction": self.reduction, "routing": None if routing is None else routing.digest(),
                # What the fields above decide together with each rank's SM count: the waves and the
                # tiles of each group, which size every group's collective (slices themselves may
                # differ by rank: this rank's copy, its receive counts).
                "grid": self.grid.describe(), "group_tiles": tuple(self.group_tiles)}

    # --- a call ----------------------------------------------------------------------------------------
    def collective(self, g: int, send, recv, **kw) -> None:
        """Group ``g``'s collective on its slices of an executor's buffers ``send`` and ``recv``; a
        failure becomes a :class:`CollectiveError` that names the plan, the group and the rank."""
        sl = self.slices[g]
        s, e = sl["send"]
        with self._naming_failures(f"the {self.buffer_layout.collective} of group {g + 1} of {self.num_groups} "
                                   f"({e - s} elements)", kw):
            self.buffer_layout.call(self.comm, sl, send, recv, **kw)

    @contextlib.contextmanager
    def _naming_failures(self, what: str, kw: dict):
        """Turn a communicator's exception into a :class:`CollectiveError` (chained) and mark the plan
        broken: a collective that timed out may still complete later against the plan's buffers, so
        no further call of the plan may run."""
        try:
            yield
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            bound = f", timeout {kw['timeout_s']:g} s" if "timeout_s" in kw else ""
            self._broken = (f"rank {self.rank} of {self.world_size}: {what} failed in the plan {self.primitive} "
                            f"{self.M}x{self.N}x{self.K} {self.dtype} partition {list(self.partition)} "
                            f"({self.comm.link}{bound}): {type(exc).__name__}: {first}")
            raise CollectiveError(self._broken) from exc

    def _check_usable(self) -> None:
        if self._broken:
            raise PlanError(f"a collective of this plan failed before ({self._broken}); the process group's state "
                            "is unknown (a timed-out collective may still complete): destroy the group "
                            "(torch.distributed.destroy_process_group) and build new plans")

    def run(self, a, b, *, ops: PostOps = PostOps(), bias=None, residual=None, residual_out=None,
            weight=None, out=None):
        """One overlapped call: ``a`` [M, K], ``b`` [N, K] (nn.Linear weight); returns the post-reordered
        output (``[M, N]``, or this rank's rows for reduce_scatter / all_to_all)."""
        import torch

        operands = dict(bias=bias, residual=residual, residual_out=residual_out, weight=weight, out=out)
        self._check_usable()
        try:
            self._call_check.agree(self, "run", lambda: (check_operands(self, a, b),
                                                         check_post_operands(self, ops, operands)))
        except PlanError:
            self.executor.join_streams()  # refused: the caller's stream still follows earlier calls' collectives
            raise
        with torch.no_grad():  # forward-only: no plan buffer may join an autograd graph
            return self.executor.run(a, b, ops, operands)

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
        check_operands(self, a, b)
        check_post_operands(self, ops, operands)
        return self.executor.timed_run(a, b, ops, gate_ms, operands)

    def capture(self, a, b, *, ops: PostOps = PostOps(), **operands):
        """Capture one whole call (GEMM, every wait and collective, post-reorder) in a CUDA graph.

        ``a``, ``b`` and the operands become static: each replay computes on whatever they hold then
        and writes the same output tensor. Host work per call drops to one graph launch. Waits read
        their targets from the plan's device epoch, so replays and eager calls interleave freely.
        """
        if self.device != "cuda":
            raise PlanError("CUDA-graph capture needs device='cuda'")
        check_operands(self, a, b)
        check_post_operands(self, ops, operands)
        return self.executor.capture(a, b, ops, operands)

    def all_gather(self, local, ops: PostOps = PostOps(), **operands):
        """AllGather of a reduce_scatter plan's per-rank rows, restored to global row order ``[M, N]``
        by the block-cyclic permutation fused into the post step."""
        import torch

        if self.primitive != "reduce_scatter":
            raise PlanError("all_gather restores the rows of a reduce_scatter plan")
        self._check_usable()
        self._call_check.agree(self, "all_gather", lambda: (check_tensor(self, local, "local", (self.out_rows, self.N)),
                                           check_post_operands(self, ops, operands)))
        R = self.tables.max_rows
        padded = torch.zeros(R * self.N, dtype=local.dtype, device=local.device)
        padded[:local.numel()] = local.reshape(-1)
        gathered = torch.empty(self.world_size * R * self.N, dtype=local.dtype, device=local.device)
        kw = self.executor.collective_kw
        with self._naming_failures(f"the all_gather restoring the rows ({padded.numel()} elements)", kw):
            self.comm.all_gather(padded, gathered, **kw)
        return self.executor.restore(gathered, self.tables.allgather_table(), ops, operands)

    # --- state of the CUDA executor (no-ops on the CPU) ----------------------------------------------
    def check(self, block: bool = True) -> None:
        """Raise :class:`fo_lib.counting.WaitError` if a previous call's wait timed out (``block=False``:
        only if that call has finished)."""
        if self.device == "cuda":
            self.executor.check(block)

    def reset(self) -> None:
        """Clear the counting table, the error word and the epoch (after a failed wait)."""
        if self.device == "cuda":
            self.executor.reset()

    @property
    def comm_graph_active(self) -> bool:
        """Whether calls replay the captured communication graph (False with ``comm_graph=False``, on
        the CPU, or when the link could not be captured)."""
        return getattr(self.executor, "comm_graphs", None) is not None

    @property
    def epoch(self) -> int:
        """Calls completed since the plan was built or reset (mod 2^32; synchronizes the device)."""
        return self.executor.epoch if self.device == "cuda" else 0

    describe = describe_plan

    def __repr__(self) -> str:
        return f"OverlapPlan({self.describe()})"
