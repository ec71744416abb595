"""The CUDA executor: the signaled GEMM on the caller's stream; on a high-priority communication
stream, per group, the counter wait and the group's collective, then the epoch bump; the
post-reorder back on the caller's stream, staged (the rows the early groups complete run beside the
last groups' collectives).

Every kernel is loaded and every buffer allocated when the plan is built (a wait enqueued before
its producer's first launch would deadlock on lazy loading); the waits are packed once, and the
GEMM's and the post-reorder's launches once per set of tensor addresses. The communication side
touches only plan-owned buffers and reads its targets on the device, so it is captured once as CUDA
graphs (one per post-reorder stage) and replayed by every call: an eager call then costs a few
launches on the host instead of two per group.
"""
from __future__ import annotations

import time
import warnings
import weakref

from .. import counting, gemm, jit, postops
from .._util import gpu_sleep
from ..comm import comm_buffer
from .errors import PlanError, check_plans_agree

POST_OPERANDS = ("bias", "residual", "residual_out", "weight", "out")


class CudaExecutor:
    def __init__(self, plan):
        import torch

        # A proxy, not a reference: a plan <-> executor cycle would leave dropped plans to the cyclic
        # GC, which may free their pinned buffers and events in the middle of another plan's graph
        # capture and invalidate it.
        self.plan = p = weakref.proxy(plan)
        # Held strongly: a captured call (GraphedCall) replays into the communicator's buffers (the
        # loopback's staging memory) after the plan itself may be gone.
        self.comm = plan.comm
        self.collective_kw = {}  # NCCL collectives only enqueue: the counter waits carry the timeout
        self.device = dev = torch.device("cuda", torch.cuda.current_device())
        # Zeroed once: padding of tail subtiles is never written but does take part in reductions.
        # A communicator may place it where its collectives run best (NCCL's symmetric windows).
        self.send = comm_buffer(p.comm, p.tables.buffer_elements, p.torch_dtype, dev).zero_()
        # The receive buffer too where the layout's collective may run on the copy engines (both ends
        # of an All-to-All in symmetric windows).
        self.recv = None
        if p.buffer_layout.result == "recv":
            self.recv = (comm_buffer(p.comm, p.recv_elements, p.torch_dtype, dev).zero_()
                         if p.buffer_layout.copy_engine_ok else
                         torch.zeros(p.recv_elements, dtype=p.torch_dtype, device=dev))
        self.row_offset = torch.from_numpy(p.tables.row_offset).to(dev)
        # How the GEMM stores: a place per tile where the layout is tile blocks (AllReduce tiles,
        # ReduceScatter subtiles: no row table to read), else the row table (All-to-All), or C
        # row-major (None, None: the rows layout's in-place store).
        place = getattr(p.tables, "tile_place", None) if gemm.kernels_for(p.config).place_store else None
        self.tile_place = None if place is None else torch.from_numpy(place).to(dev)
        self.store_table = None if (p.buffer_layout.stores_in_place or self.tile_place is not None) \
            else self.row_offset
        self.tile_group = torch.from_numpy(p.tables.tile_group).to(dev)
        self.post_table = torch.from_numpy(p.post_table.copy()).to(dev)
        stride = p.buffer_layout.peer_stride
        self.peer_stride = None if stride is None else torch.from_numpy(stride).to(dev)
        self.counters = torch.zeros(p.num_groups, dtype=torch.int32, device=dev)
        self.epoch_word = torch.zeros(1, dtype=torch.int32, device=dev)  # calls completed, mod 2^32
        self.error = torch.zeros(1, dtype=torch.int32, device=dev)
        self._error_host = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        self._done = torch.cuda.Event()
        # Re-recorded every call: a wait on an event waits for its latest record at enqueue time.
        self._group_done = [torch.cuda.Event() for _ in range(p.num_groups)]
        self._pending_check = False
        self.comm_stream = torch.cuda.Stream(device=dev, priority=-100)  # clamped to the highest priority
        # Every call enqueues the same waits and epoch bump: packed once (a launch then costs a
        # driver call, not the checks and argument packing of counting.wait_epoch).
        self._waits = [counting.wait_epoch_launch(self.counters, g, p.group_tiles[g], self.epoch_word,
                                                  self.error, p.timeout_ns) for g in range(p.num_groups)]
        self._bump_epoch = counting.bump_counter_launch(self.epoch_word, 0, 1)
        reserve = getattr(p.comm, "reserve", None)
        if reserve is not None:
            reserve(self.send.numel() * self.send.element_size())
        self._warm_up()
        self.comm_graphs = self._capture_comm_side() if p.comm_graph else None

    @property
    def result(self):
        return self.send if self.plan.buffer_layout.result == "send" else self.recv

    def _gemm(self, a, b, stream=None) -> None:
        p = self.plan
        gemm.kernels_for(p.config).gemm_nt_signal(a, b, self.send, self.store_table, self.tile_group, self.counters,
                                                  config=p.config, ctas=p.ctas, stream=stream,
                                                  tile_place=self.tile_place)

    def _warm_up(self) -> None:
        """Load every kernel of a call (GEMM, wait, post-reorder, the collective path) before any wait
        is enqueued behind a producer, then reset the counting table."""
        import torch

        p = self.plan
        try:  # this rank's own kernels first (a compile or launch may fail on one rank only) ...
            self._gemm(torch.zeros(p.M, p.K, dtype=p.torch_dtype, device=self.device),
                       torch.zeros(p.N, p.K, dtype=p.torch_dtype, device=self.device))
            self.epoch_word.fill_(-1)  # epoch 2^32 - 1: the next target is 0, so these waits pass at once
            counting.wait_epoch(self.counters, 0, 1, self.epoch_word, self.error, p.timeout_ns)
            postops.post_reorder(self.result, self.post_table, (p.out_rows, p.N), p.grid.BN, sources=p.sources,
                                 peer_stride=self.peer_stride)
            torch.cuda.synchronize(self.device)
        except Exception as exc:
            check_plans_agree(self.comm, error=exc)
            raise
        check_plans_agree(self.comm, {"kernels": "loaded"})  # ... then the collectives, on every rank or none
        self._collectives(torch.cuda.current_stream(self.device), wait=False)
        torch.cuda.synchronize(self.device)
        self.counters.zero_()
        self.epoch_word.zero_()
        self.send.zero_()
        torch.cuda.synchronize(self.device)

    def _comm_segments(self) -> list[range]:
        """The groups of each captured communication graph: split where the staged post-reorder's
        first stage may start, so an eager call restores the early rows beside the last groups'
        collectives, as a group-by-group call does."""
        stages, G = self.plan.post_stages, self.plan.num_groups
        if len(stages) < 2:
            return [range(G)]
        cut = stages[0][0] + 1
        return [range(cut), range(cut, G)]

    def _capture_comm_side(self):
        """The communication side of a call (every group's wait and collective, the epoch bump) as
        CUDA graphs on the communication stream, ``[(graph, its groups)]`` per segment; None (and a
        warning) if the link cannot be captured."""
        import torch

        graphs, broken = [], self.plan._broken
        try:
            for groups in self._comm_segments():
                graph = torch.cuda.CUDAGraph()
                with jit.capture_graph(graph, stream=self.comm_stream):
                    self._collectives(self.comm_stream, wait=True, groups=groups)
                graphs.append((graph, groups))
        except Exception as exc:  # noqa: BLE001 - e.g. a communicator that synchronizes the host
            self.plan._broken = broken  # a capture runs nothing: the group by group calls find the link as it was
            warnings.warn(f"the communication side of {self.plan.describe()} could not be captured as a CUDA "
                          f"graph ({type(exc).__name__}: {exc}); launching it group by group", stacklevel=4)
            torch.cuda.synchronize(self.device)
            return None
        torch.cuda.synchronize(self.device)
        return graphs

    def _collectives(self, stream, *, wait: bool, events: list | None = None, done: dict | None = None,
                     groups: range | None = None) -> None:
        """Every group's collective (``groups``: a range of them), each behind its counter wait
        (``wait``), then the epoch bump after the last group. ``events``: receives per group the
        CUDA events recorded when its wait returned and when its collective finished (the measured
        timeline); ``done``: receives per group an event recorded when its collective finished."""
        import torch

        p = self.plan
        groups = range(p.num_groups) if groups is None else groups
        with torch.cuda.stream(stream):
            for g in groups:
                torch.cuda.nvtx.range_push(f"fo group {g}")
                if wait:
                    self._waits[g](stream)
                ready = _record(stream) if events is not None else None
                p.collective(g, self.send, self.recv)
                if events is not None:
                    events.append((ready, _record(stream)))
                if done is not None:
                    if events is not None:
                        done[g] = events[-1][1]
                    else:
                        self._group_done[g].record(stream)
                        done[g] = self._group_done[g]
                torch.cuda.nvtx.range_pop()
            if wait and groups[-1] == p.num_groups - 1:
                self._bump_epoch(stream)

    # --- a call ----------------------------------------------------------------------------------
    def run(self, a, b, ops, operands: dict):
        self.check(block=False)
        try:
            return self.enqueue(a, b, ops, **operands)
        finally:
            self.mark_pending()

    def enqueue(self, a, b, ops, *, replay_comm: bool = True, events: dict | None = None, **operands):
        """GEMM on the caller's stream, the groups' waits and collectives on the communication stream
        (the captured communication graph when there is one and ``replay_comm``), the post-reorder
        back on the caller's stream (which ends up waiting for everything). ``events``: a dict that
        receives the CUDA events of :meth:`timed_run` (group by group, no graph)."""
        import torch

        compute = torch.cuda.current_stream(self.device)
        replay = events is None and replay_comm and self.comm_graphs is not None
        self._check_post_operands(operands)
        # The communication stream may reuse the receive buffer only after the caller's stream has
        # consumed the previous call's output.
        self.comm_stream.wait_stream(compute)
        if events is not None:
            events["gemm_start"] = _record(compute)
        self._gemm(a, b, compute)
        done: dict = {}
        if events is not None:
            events["gemm_end"] = _record(compute)
            events["groups"], events["post"] = [], []
            self._collectives(self.comm_stream, wait=True, events=events["groups"], done=done)
        elif replay:
            with torch.cuda.stream(self.comm_stream):
                for graph, groups in self.comm_graphs:
                    graph.replay()
                    event = self._group_done[groups[-1]]
                    event.record(self.comm_stream)
                    done.update(dict.fromkeys(groups, event))
        else:
            self._collectives(self.comm_stream, wait=True, done=done)
        # NOTES: built after the GEMM and the collectives are enqueued, so the GPU starts on them
        # while the host builds and checks the post-reorder (a new output tensor misses the launch
        # memo, which costs tens of microseconds per stage).
        try:
            launches, result = self._post_launches(ops, operands) if not self._in_place(ops, operands) \
                else ([], self.send.view(self.plan.M, self.plan.N))
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

    def join_streams(self) -> None:
        """Order the caller's stream after the communication stream's work, as a completed call does
        (a refused call enqueues nothing, but the caller may rely on the join)."""
        import torch

        torch.cuda.current_stream(self.device).wait_stream(self.comm_stream)

    def _in_place(self, ops, operands) -> bool:
        """The rows layout with nothing to apply: the buffer already is the output."""
        return (self.plan.buffer_layout.stores_in_place and ops.is_identity
                and all(operands.get(k) is None for k in POST_OPERANDS))

    def _check_post_operands(self, operands) -> None:
        """The post-reorder operands' names and row shapes (stages slice them by rows)."""
        import torch

        p = self.plan
        unknown = set(operands) - set(POST_OPERANDS)
        if unknown:
            raise PlanError(f"unknown post-reorder operands {sorted(unknown)}")
        for k in ("residual", "residual_out", "out"):
            t = operands.get(k)
            if t is not None and (not isinstance(t, torch.Tensor) or tuple(t.shape) != (p.out_rows, p.N)):
                got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise PlanError(f"{k} must be a [{p.out_rows}, {p.N}] tensor, got {got}")

    def _post_launches(self, ops, operands) -> tuple[list, object]:
        """Post-reorder launches ``[(group, launch)]``, one per stage ``(group, r0, r1)`` (rows
        ``r0:r1`` of the output and of the row operands), and the output tensor."""
        import torch

        p = self.plan
        rows = {k: operands.get(k) for k in ("residual", "residual_out", "out")}
        if rows["out"] is None and len(p.post_stages) > 1:
            rows["out"] = torch.empty((p.out_rows, p.N), dtype=p.torch_dtype, device=self.device)
        launches = []
        for g, r0, r1 in p.post_stages:
            part = {k: (None if t is None else t[r0:r1]) for k, t in rows.items()}
            stride = None if self.peer_stride is None else self.peer_stride[r0:r1]
            launches.append((g, postops.post_reorder_launcher(
                self.result, self.post_table[r0:r1], (r1 - r0, p.N), p.grid.BN, ops, bias=operands.get("bias"),
                weight=operands.get("weight"), sources=p.sources, peer_stride=stride, **part)))
        out = rows["out"] if rows["out"] is not None else launches[0][1].out
        return launches, out

    def timed_run(self, a, b, ops, gate_ms: float, operands: dict):
        """See :meth:`fo_lib.engine.OverlapPlan.timed_run`."""
        import torch

        self.check()
        torch.cuda.synchronize(self.device)
        host_start = time.perf_counter()
        gate_start = _record(torch.cuda.current_stream(self.device))
        gpu_sleep(gate_ms)
        events: dict = {}
        out = self.enqueue(a, b, ops, events=events, **operands)
        host_ms = (time.perf_counter() - host_start) * 1e3
        self.mark_pending()
        torch.cuda.synchronize(self.device)
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

    def capture(self, a, b, ops, operands: dict) -> "GraphedCall":
        import torch

        self.check()
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with jit.capture_graph(graph):
            output = self.enqueue(a, b, ops, replay_comm=False, **operands)
        torch.cuda.synchronize(self.device)
        return GraphedCall(self, graph, output)

    def restore(self, gathered, table, ops, operands: dict):
        """The post step of ReduceScatter's AllGather (:meth:`OverlapPlan.all_gather`)."""
        import torch

        if not hasattr(self, "_ag_table"):
            self._ag_table = torch.from_numpy(table).to(self.device)
        return postops.post_reorder(gathered, self._ag_table, (self.plan.M, self.plan.N), self.plan.grid.BN, ops,
                                    **operands)

    # --- the error word ----------------------------------------------------------------------------
    def mark_pending(self) -> None:
        import torch

        self._done.record(torch.cuda.current_stream(self.device))
        self._pending_check = True

    def check(self, block: bool = True) -> None:
        """Raise :class:`counting.WaitError` if a previous call's wait timed out (``block=False``: only
        if that call has finished)."""
        if not self._pending_check:
            return
        if not block and not self._done.query():
            return
        self._done.synchronize()
        self._pending_check = False
        if int(self._error_host[0]):
            raise counting.WaitError(int(self._error_host[0]) - 1)

    def reset(self) -> None:
        """Clear the counting table, the error word and the epoch (after a failed wait)."""
        import torch

        torch.cuda.synchronize(self.device)
        self.counters.zero_()
        self.error.zero_()
        self.epoch_word.zero_()
        self._pending_check = False
        torch.cuda.synchronize(self.device)

    @property
    def epoch(self) -> int:
        import torch

        torch.cuda.synchronize(self.device)
        return int(self.epoch_word.item()) & 0xFFFFFFFF


class GraphedCall:
    """A captured :meth:`fo_lib.engine.OverlapPlan.run`; calling it replays the graph and returns its
    output tensor (the same tensor on every call: copy it if a later replay must not overwrite it)."""

    def __init__(self, executor: CudaExecutor, graph, output):
        self.executor, self.graph, self.output = executor, graph, output

    def __call__(self):
        self.executor.check(block=False)
        self.graph.replay()
        self.executor.mark_pending()
        return self.output


def _record(stream):
    """A timing event recorded on ``stream`` now."""
    import torch

    ev = torch.cuda.Event(enable_timing=True)
    ev.record(stream)
    return ev
