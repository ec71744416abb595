"""Collectives through ``torch.distributed``: NCCL for CUDA tensors, gloo for CPU tensors."""
from __future__ import annotations

import atexit
import contextlib
import datetime
import os

from . import check_counts


class TorchDistCommunicator:
    """The default process group (or ``group``) of ``torch.distributed``.

    NCCL collectives are enqueued behind the work already on the current stream, so a wait kernel
    launched on that stream gates them. gloo runs synchronously on the CPU (the CI path).

    ``max_ctas``: a communicator of its own whose kernels use at most that many CTAs.
    ``copy_engine``: a communicator of its own with NCCL's zero-CTA policy (NCCL >= 2.28): its
    AllGather runs on the copy engines, with no SM, when both buffers lie in symmetric windows,
    which :meth:`empty` allocates (the engine asks for its buffer there). Its ``sm_footprint`` is 1,
    the SM of the engine's wait kernel, so the engine accepts it only for the in-place AllGather of
    ``OverlapPlan(reduction="post_reorder")``; AllReduce and ReduceScatter still run NCCL's kernels
    (the baselines may call them). Buffers from :meth:`empty` stay allocated and registered as long
    as the communicator lives (deregistering is collective, and ranks drop plans at different
    times), so use one such communicator per experiment, not per plan.
    """

    def __init__(self, group=None, *, max_ctas: int | None = None, copy_engine: bool = False):
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized: call init_process_group first "
                               "(torchrun sets the environment; see fo_lib.comm.torch_dist.init_from_env)")
        self._dist = dist
        self.max_ctas = max_ctas
        self.copy_engine = bool(copy_engine)
        self._windows = []  # (pool, tensor, window) of every symmetric buffer, alive with the communicator
        self._side_streams = {}  # device -> stream (_off_null_stream)
        # Plan-time exchanges (all_gather_object) run on the group the caller gave: a group of our
        # own below may be a copy-engine one, whose calls need symmetric buffers off the legacy stream.
        self._control_group = group
        if self.copy_engine:
            if dist.get_backend(group) != "nccl":
                raise ValueError("copy_engine applies to NCCL process groups only")
            if max_ctas is not None:
                raise ValueError("copy_engine and max_ctas exclude each other (the copy engines take no CTA)")
            policy = getattr(dist.ProcessGroupNCCL, "NCCL_CTA_POLICY_ZERO", None)
            if policy is None:
                raise RuntimeError("this torch has no NCCL CTA policy (copy_engine needs torch >= 2.9, NCCL >= 2.28)")
            opts = dist.ProcessGroupNCCL.Options()
            opts.is_high_priority_stream = True
            opts.config.cta_policy = policy
            opts.config.cga_cluster_size = int(os.environ.get("NCCL_CGA_CLUSTER_SIZE", 1))
            ranks = None if group is None else dist.get_process_group_ranks(group)
            group = dist.new_group(ranks, pg_options=opts, timeout=datetime.timedelta(seconds=group_timeout_s()))
        elif max_ctas is not None:
            # A communicator of its own whose kernels use at most max_ctas CTAs (= SMs), so a GEMM can
            # leave exactly that many SMs free (ncclConfig_t.maxCTAs/minCTAs, NCCL >= 2.17).
            if dist.get_backend(group) != "nccl":
                raise ValueError("max_ctas applies to NCCL process groups only")
            if not isinstance(max_ctas, int) or max_ctas < 1:
                raise ValueError(f"max_ctas must be a positive integer, got {max_ctas!r}")
            opts = dist.ProcessGroupNCCL.Options()
            opts.is_high_priority_stream = True
            opts.config.max_ctas = max_ctas
            opts.config.min_ctas = max_ctas
            opts.config.cga_cluster_size = int(os.environ.get("NCCL_CGA_CLUSTER_SIZE", 1))
            ranks = None if group is None else dist.get_process_group_ranks(group)
            group = dist.new_group(ranks, pg_options=opts, timeout=datetime.timedelta(seconds=group_timeout_s()))
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.link = dist.get_backend(group)
        # SMs NCCL's kernels occupy beside the GEMM (one CTA per channel): max_ctas when bounded, else
        # NCCL_MAX_CTAS if set, else what NCCL chose for large messages on 2 H200s (24 CTAs for
        # AllReduce and ReduceScatter, 32 for All-to-All: partition_tuning.measure_sm_footprint, data/h200x2).
        # Override with OverlapPlan(comm_sms=...).
        if self.link == "gloo":
            self.sm_footprint = 0
        elif self.copy_engine:
            self.sm_footprint = 1
        else:
            self.sm_footprint = int(max_ctas or os.environ.get("NCCL_MAX_CTAS", 32))

    def empty(self, numel: int, dtype, device):
        """A CUDA tensor in an NCCL symmetric window of this communicator (copy_engine), else a plain
        one. Collective: every rank must allocate the same sizes in the same order."""
        import torch

        if not self.copy_engine:
            return torch.empty(numel, dtype=dtype, device=device)
        backend = self.group._get_backend(torch.device(device))  # copy_engine: always a group of its own
        pool = torch.cuda.MemPool(backend.mem_allocator)  # ncclMemAlloc: what symmetric windows need
        with torch.cuda.use_mem_pool(pool):
            t = torch.empty(numel, dtype=dtype, device=device)
        torch.cuda.synchronize(device)
        window = _register_window(backend._comm_ptr(), t.data_ptr(), t.numel() * t.element_size())
        self._windows.append((pool, t, window))
        return t

    def all_reduce(self, buf, *, timeout_s: float | None = None) -> None:
        self._call(self._dist.all_reduce, buf, timeout_s=timeout_s)

    def reduce_scatter(self, send, recv, *, timeout_s: float | None = None) -> None:
        if send.numel() != recv.numel() * self.world_size:
            raise ValueError(f"reduce_scatter: send has {send.numel()} elements, expected "
                             f"{self.world_size} x {recv.numel()}")
        self._call(_REDUCE_SCATTER, recv, send, timeout_s=timeout_s)

    def all_gather(self, send, recv, *, timeout_s: float | None = None) -> None:
        if recv.numel() != send.numel() * self.world_size:
            raise ValueError(f"all_gather: recv has {recv.numel()} elements, expected "
                             f"{self.world_size} x {send.numel()}")
        self._off_null_stream(lambda: self._call(_ALL_GATHER, recv, send, timeout_s=timeout_s))

    def all_to_all(self, send, send_counts, recv, recv_counts, *, timeout_s: float | None = None) -> None:
        sc = check_counts(send_counts, self.world_size, send.numel(), "all_to_all send")
        rc = check_counts(recv_counts, self.world_size, recv.numel(), "all_to_all recv")
        if len(set(sc)) == 1 and sc == rc:  # equal chunks: NCCL's AlltoAll (its copy-engine path can take it)
            sc = rc = None
        self._off_null_stream(lambda: self._call(self._dist.all_to_all_single, recv, send, output_split_sizes=rc,
                                                 input_split_sizes=sc, timeout_s=timeout_s))

    def _call(self, collective, *args, timeout_s: float | None = None, **kw) -> None:
        """``collective(*args, group=..., **kw)``. With ``timeout_s`` on a CPU (gloo) group, waiting
        for the peers raises after ``timeout_s`` instead of the group's timeout. NCCL calls only
        enqueue work on the stream: the engine's counter waits bound them there."""
        if timeout_s is None or self.link == "nccl":
            collective(*args, group=self.group, **kw)
            return
        with self._bounded(self.group, timeout_s):
            work = collective(*args, group=self.group, async_op=True, **kw)
        work.wait(timeout=datetime.timedelta(seconds=float(timeout_s)))

    @contextlib.contextmanager
    def _bounded(self, group, timeout_s: float | None):
        """gloo ops enqueued inside carry ``timeout_s`` as their own timeout: waiting alone would
        leave a stalled op in gloo's worker thread until the group's timeout (120 s by default),
        and the process could only exit after it."""
        import torch

        backend = None
        if timeout_s is not None and self.link == "gloo":
            pg = group if group is not None else self._dist.distributed_c10d._get_default_group()
            backend = pg._get_backend(torch.device("cpu"))
        options = getattr(backend, "options", None)
        saved = getattr(options, "_timeout", None)
        if saved is None or not hasattr(backend, "_set_default_timeout"):  # an older torch: the group's timeout
            yield
            return
        backend._set_default_timeout(datetime.timedelta(seconds=float(timeout_s)))
        try:
            yield
        finally:
            backend._set_default_timeout(saved)

    def _off_null_stream(self, collective) -> None:
        """Run ``collective``; a copy-engine one not on the legacy default stream. torch enqueues a
        synchronous NCCL call on the current stream, and NCCL's copy-engine path
        (``cudaMemcpyBatchAsync``) rejects the legacy stream ('invalid argument'), so from there
        it runs on a side stream, ordered after and before the current stream's work by events."""
        import torch

        if not self.copy_engine or self.link != "nccl":
            collective()
            return
        current = torch.cuda.current_stream()
        if current.cuda_stream != 0:
            collective()
            return
        side = self._side_streams.get(current.device)
        if side is None:
            side = self._side_streams[current.device] = torch.cuda.Stream(device=current.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            collective()
        current.wait_stream(side)

    def broadcast_object(self, obj, src: int = 0):
        """``obj`` as rank ``src`` has it (picklable), on every rank: measurements that decide what
        runs next (profiles, chosen partitions) must agree, or the ranks' collectives diverge."""
        box = [obj]
        self._dist.broadcast_object_list(box, src=src, group=self.group)
        return box[0]

    def max_over_ranks(self, values) -> list[float]:
        """Element-wise maximum of a list of floats over the ranks (the slowest rank decides a time)."""
        import torch

        t = torch.tensor([float(v) for v in values], dtype=torch.float64)
        if self.link == "nccl":
            t = t.cuda()
        self._dist.all_reduce(t, op=self._dist.ReduceOp.MAX, group=self.group)
        return t.cpu().tolist()

    def all_gather_object(self, obj, *, timeout_s: float | None = None) -> list:
        """Every rank's ``obj`` (picklable), in rank order: plan-time agreement checks. ``timeout_s``
        (gloo): how long to wait for the peers (None: the group's timeout)."""
        out = [None] * self.world_size
        with self._bounded(self._control_group, timeout_s):
            self._dist.all_gather_object(out, obj, group=self._control_group)
        return out


def _current_name(new: str, old: str):
    """The collective under its current torch name (newer torch renamed a few and warns on every
    call of the old name; older torch has only the old one)."""
    import torch.distributed as dist

    return getattr(dist, new, None) or getattr(dist, old)


_ALL_GATHER = _current_name("all_gather_single", "all_gather_into_tensor")
_REDUCE_SCATTER = _current_name("reduce_scatter_single", "reduce_scatter_tensor")

NCCL_WIN_COLL_SYMMETRIC = 0x01


def _libnccl():
    """The libnccl torch loaded, opened again by its path (the same library, the same handle)."""
    import ctypes

    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libnccl.so"):  # not a plugin (libnccl-net.so, ...)
                return ctypes.CDLL(path)
    raise RuntimeError("torch's NCCL library is not loaded in this process (is torch.distributed using NCCL?)")


def _register_window(comm_ptr: int, ptr: int, nbytes: int) -> int:
    """``ncclCommWindowRegister(comm, ptr, nbytes, &win, NCCL_WIN_COLL_SYMMETRIC)`` (collective);
    torch has no Python binding for it. The window lives as long as the communicator."""
    import ctypes

    lib = _libnccl()
    fn = lib.ncclCommWindowRegister
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    fn.restype = ctypes.c_int
    win = ctypes.c_void_p()
    rc = fn(ctypes.c_void_p(comm_ptr), ctypes.c_void_p(ptr), ctypes.c_size_t(nbytes), ctypes.byref(win),
            ctypes.c_int(NCCL_WIN_COLL_SYMMETRIC))
    if rc != 0:
        raise RuntimeError(f"ncclCommWindowRegister failed with ncclResult {rc}")
    return int(win.value or 0)


def group_timeout_s() -> float:
    """How long a process group's collectives wait for a stalled peer before they fail: the
    ``FO_GROUP_TIMEOUT_S`` environment variable, default 120 s. Calls of an ``OverlapPlan`` on the
    CPU bound their collectives by the plan's own ``timeout_ms`` instead."""
    raw = os.environ.get("FO_GROUP_TIMEOUT_S", "120")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"FO_GROUP_TIMEOUT_S must be a number of seconds, got {raw!r}") from None
    if not 0 < value < 10**9:  # a timedelta holds no infinity
        raise ValueError(f"FO_GROUP_TIMEOUT_S must be a positive, finite number of seconds, got {raw!r}")
    return value


def init_from_env(backend: str | None = None, timeout_s: float | None = None) -> TorchDistCommunicator:
    """Initialise ``torch.distributed`` from the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT) if needed and return the communicator. NCCL's NVLink multicast stays off.
    ``timeout_s``: the group's timeout (default :func:`group_timeout_s`)."""
    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    # NCCL launches its CTAs in clusters (4 on Hopper by default): a cluster needs that many free SMs
    # of one GPC at once, which a persistent GEMM beside it rarely leaves, so the collective would wait
    # for the GEMM to end. Single-CTA clusters fit in any free SM.
    os.environ.setdefault("NCCL_CGA_CLUSTER_SIZE", "1")
    if not dist.is_initialized():
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        kw = {}
        if backend == "nccl":
            local = int(os.environ.get("LOCAL_RANK", 0))
            torch.cuda.set_device(local)
            kw["device_id"] = torch.device("cuda", local)
            # NCCL's internal stream follows our comm stream; make it high priority too so its
            # kernels are scheduled ahead of the GEMM's remaining CTAs.
            opts = dist.ProcessGroupNCCL.Options()
            opts.is_high_priority_stream = True
            kw["pg_options"] = opts
        seconds = group_timeout_s() if timeout_s is None else float(timeout_s)
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=seconds), **kw)
        # Left to the interpreter's teardown, a gloo group's threads are sometimes destroyed while
        # still joinable, which aborts the process (SIGABRT) after a clean run or a peer's failure.
        atexit.register(_destroy_at_exit)
    return TorchDistCommunicator()


def _destroy_at_exit() -> None:
    """Destroy the process group :func:`init_from_env` created, if the program did not (no
    barrier: a peer may be gone)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def shutdown() -> None:
    """Tear the process group down once every rank is done: collect dropped plans (their captured
    graphs hold NCCL work), synchronize, barrier, then destroy."""
    import gc

    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
