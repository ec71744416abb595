"""Offline measurements that feed the predictor (GPU).

* :func:`measure_gemm_profile`: per-wave durations of the signaled GEMM's tile schedule from the
  probe epilogue's per-tile ``%globaltimer`` stamps, plus the plain GEMM on every SM.
* :func:`measure_curve`: latency of one collective against message size on a communicator.
* :func:`tune`: both, then the exact partition search of :mod:`fo_lib.predictor`.

Results are :class:`fo_lib.profiles.GemmProfile` / :class:`~fo_lib.profiles.BandwidthCurve`, which
save to and load from versioned JSON.

Not the GEMM's own config tuning (which tile config a shape runs, timed on its first call):
:mod:`fo_lib.gemm.config_tuning`.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ._util import require_torch
from .predictor import OverlapModel
from .profiles import BandwidthCurve, GemmProfile
from .tiling import TileGrid


def _event_ms(fn, repeats: int, warmup: int = 2, calls: int = 3) -> float:
    """GPU time of one call of ``fn`` (median over ``repeats`` samples of ``calls`` calls each). The
    calls are enqueued behind a ~2 ms GPU sleep, so what the events measure is the device's time,
    not the host's time to launch: timed one at a time, a small NCCL call measured its ~50-80 us of
    Python and NCCL host work instead (the curves' small-message floor before this change)."""
    from ._util import SLEEP_CYCLES_PER_MS
    from .testing import host_and_gpu_time

    for _ in range(warmup):
        fn()
    sleep_cycles = 2 * SLEEP_CYCLES_PER_MS  # ~2 ms
    host_us, gpu_ms = host_and_gpu_time(fn, calls=calls, rounds=repeats, sleep_cycles=sleep_cycles)
    if host_us * calls > 1000.0:  # enqueueing took over ~1 ms: sleep 4x longer than that, measure again
        sleep_cycles = int(4 * host_us * calls * SLEEP_CYCLES_PER_MS / 1000)
        host_us, gpu_ms = host_and_gpu_time(fn, calls=calls, rounds=repeats, sleep_cycles=sleep_cycles)
    return float(gpu_ms)


def wave_durations(probe: np.ndarray, grid: TileGrid) -> np.ndarray:
    """Per-wave durations (ms) from probe stamps ``[tiles, 4]`` (start ns, end ns, smid, cta):
    wave ``w`` ends when its last tile ends; wave 0 starts at the first tile's start."""
    end = probe[:, 1].astype(np.int64)
    wave_end = np.array([end[grid.wave_tiles(w)].max() for w in range(grid.num_waves)], dtype=np.float64)
    start = float(probe[:, 0].min())
    return np.diff(np.concatenate(([start], wave_end))) / 1e6


def measure_gemm_profile(M: int, N: int, K: int, *, config=None, ctas: int | None = None, comm_sms: int = 0,
                         dtype: str = "bf16", repeats: int = 5) -> GemmProfile:
    torch = require_torch()
    from . import gemm

    sms = gemm.sm_count()
    config = config or gemm.auto_config(M, N, K, sms)
    ctas = ctas or sms - comm_sms
    config = config.for_ctas(ctas)  # what a plan on ctas CTAs runs (a cluster needs an even count)
    run = gemm.kernels_for(config)
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    a = torch.randn(M, K, device="cuda").to(tdtype)
    b = torch.randn(N, K, device="cuda").to(tdtype)
    grid = config.grid(M, N, ctas)
    runs = []
    for _ in range(repeats + 1):
        _, probe = run.gemm_nt_probe(a, b, config=config, ctas=ctas)
        torch.cuda.synchronize()
        runs.append(wave_durations(probe.cpu().numpy(), grid))
    waves = np.median(np.stack(runs[1:]), axis=0)  # the first run pays for loading the kernel
    out = torch.empty(M, N, dtype=tdtype, device="cuda")
    full = _event_ms(lambda: run.gemm_nt(a, b, out, config=config), repeats)
    baseline = _event_ms(lambda: torch.matmul(a, b.T, out=out), repeats)  # the sequential fallback's GEMM
    # The probe's clock reads add a little: scale the waves to the signaled GEMM's event time.
    ro = torch.zeros(M, grid.tiles_n, dtype=torch.int64, device="cuda")
    ro += torch.arange(M, device="cuda")[:, None] * N + torch.arange(grid.tiles_n, device="cuda")[None, :] * config.BN
    tg = torch.zeros(grid.num_tiles, dtype=torch.int32, device="cuda")
    cnt = torch.zeros(1, dtype=torch.int32, device="cuda")
    buf = torch.empty(M * N, dtype=tdtype, device="cuda")
    signal_ms = _event_ms(lambda: run.gemm_nt_signal(a, b, buf, ro, tg, cnt, config=config, ctas=ctas), repeats)
    waves = waves * (signal_ms / waves.sum())
    elem = torch.finfo(tdtype).bits // 8
    return GemmProfile(M=M, N=N, K=K, dtype=dtype, config=dataclasses.asdict(config),
                       sm_count=sms, comm_sms=sms - ctas if ctas <= sms else 0, ctas=ctas,
                       wave_ms=tuple(float(w) for w in waves),
                       wave_bytes=tuple(int(x) * elem for x in grid.wave_elements()), full_ms=full,
                       baseline_ms=baseline, gpu=torch.cuda.get_device_name())


def measure_curve(comm, primitive: str, sizes_bytes, *, dtype: str = "bf16", repeats: int = 5) -> BandwidthCurve:
    """Median latency of ``primitive`` on ``comm`` for each message size (bytes handed to the collective)."""
    torch = require_torch()
    points = []
    for nbytes in sorted(set(int(s) for s in sizes_bytes)):
        fn, moved = collective_fn(comm, primitive, nbytes, dtype)
        points.append((float(moved), _event_ms(fn, repeats)))
    return BandwidthCurve(tuple(points), primitive=primitive, world_size=comm.world_size, link=comm.link,
                          meta={"gpu": torch.cuda.get_device_name()})


def collective_fn(comm, primitive: str, nbytes: int, dtype: str = "bf16"):
    """A closure running ``primitive`` on ``comm`` over a message of about ``nbytes`` (equal splits);
    returns ``(fn, bytes actually moved per call)``. ``"all_gather"`` is the in-place AllGather of
    ``OverlapPlan(reduction="post_reorder")``: ``nbytes`` from every rank, in a buffer from
    ``comm.empty`` where the communicator has one (NCCL's symmetric windows)."""
    torch = require_torch()
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    elem = torch.finfo(tdtype).bits // 8
    W = comm.world_size
    n = max(W, int(nbytes) // elem // W * W)
    if primitive == "all_gather":
        from .comm import comm_buffer
        recv = comm_buffer(comm, W * n, tdtype, torch.device("cuda", torch.cuda.current_device())).normal_()
        mine = recv[comm.rank * n:(comm.rank + 1) * n]
        return (lambda: comm.all_gather(mine, recv)), n * elem
    send = torch.randn(n, device="cuda").to(tdtype)
    if primitive == "all_reduce":
        fn = lambda: comm.all_reduce(send)  # noqa: E731
    elif primitive == "reduce_scatter":
        recv = torch.empty(n // W, dtype=tdtype, device="cuda")
        fn = lambda: comm.reduce_scatter(send, recv)  # noqa: E731
    elif primitive == "all_to_all":
        recv = torch.empty(n, dtype=tdtype, device="cuda")
        fn = lambda: comm.all_to_all(send, [n // W] * W, recv, [n // W] * W)  # noqa: E731
    else:
        raise ValueError(f"unknown primitive {primitive!r}")
    return fn, n * elem


def _kernel_grids(fn, name_part: str) -> list[tuple[int, int]]:
    """(CTAs, threads per CTA) of every CUDA kernel whose name contains ``name_part`` that ``fn``
    launches, read from a torch.profiler (CUPTI) trace."""
    import json
    import tempfile

    torch = require_torch()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name)).get("traceEvents", [])
    out = []
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") == "kernel" and name_part in e.get("name", "").lower() and "grid" in args:
            out.append((int(np.prod(args["grid"])), int(np.prod(args.get("block", [0])))))
    return out


def measure_sm_footprint(comm, primitive: str = "all_reduce", nbytes: int = 256 << 20, *, M: int = 8192,
                         N: int = 8192, K: int = 4096, config=None, kernel_name: str = "nccl") -> dict:
    """The SMs a collective takes from a GEMM that runs beside it, measured two ways.

    * ``collective_ctas``: the CTA count of the collective's kernels (profiler trace; NCCL runs one
      CTA per channel).
    * ``sms_taken``: the persistent GEMM is launched with one CTA per SM while the collective is in
      flight; a GEMM CTA that does not fit beside a collective CTA starts only when the collective
      ends. The probe epilogue's first-tile start stamps count those delayed CTAs.
    A persistent GEMM that should overlap the collective must leave ``footprint`` (the larger of the
    two) SMs free: a collective CTA that finds no room waits for the whole GEMM.
    """
    torch = require_torch()
    from . import gemm

    sms = gemm.sm_count()
    config = config or gemm.auto_config(M, N, K, sms)
    probe_gemm = gemm.kernels_for(config).gemm_nt_probe
    fn, moved = collective_fn(comm, primitive, nbytes)
    coll_ms = _event_ms(fn, 3)
    grids = _kernel_grids(fn, kernel_name) if comm.link != "emulated" else []
    a = torch.randn(M, K, device="cuda").bfloat16()
    b = torch.randn(N, K, device="cuda").bfloat16()
    probe_gemm(a, b, config=config, ctas=sms)  # load the kernel before timing anything
    side = torch.cuda.Stream(priority=-100)
    # Keep the collective in flight for the whole GEMM; every rank must issue the same number of
    # collectives, so the slowest rank's time decides.
    worst = getattr(comm, "max_over_ranks", None)
    repeat = int(np.ceil(4.0 / (worst([coll_ms])[0] if worst else coll_ms)))
    delayed = []
    for _ in range(5):
        torch.cuda.synchronize()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(repeat):
                fn()
        torch.cuda._sleep(400_000)  # ~0.2 ms: the collective's CTAs are resident before the GEMM starts
        _, probe = probe_gemm(a, b, config=config, ctas=sms)
        torch.cuda.synchronize()
        p = probe.cpu().numpy().astype(np.int64)
        first = np.full(sms, np.iinfo(np.int64).max)
        np.minimum.at(first, p[:, 3], p[:, 0])
        first = first[first < np.iinfo(np.int64).max]
        span = p[:, 1].max() - p[:, 0].min()
        delayed.append(int((first - first.min() > 0.1 * span).sum()))
    return dict(primitive=primitive, world_size=comm.world_size, link=comm.link, message_bytes=moved,
                collective_ms=coll_ms, collective_ctas=max((g for g, _ in grids), default=0),
                collective_threads=max((t for _, t in grids), default=0), sms_taken=int(np.median(delayed)),
                sms_taken_runs=delayed, gemm_ctas=sms,
                footprint=max(int(np.median(delayed)), max((g for g, _ in grids), default=0)))


def default_sizes(max_bytes: int, per_octave: int = 2, min_bytes: int = 64 * 1024) -> list[int]:
    n = int(np.ceil(np.log2(max_bytes / min_bytes) * per_octave)) + 1
    return sorted(set(int(min_bytes * 2 ** (i / per_octave)) for i in range(n)) | {int(max_bytes)})


def tune(M: int, N: int, K: int, comm, primitive: str, *, config=None, ctas=None, curve: BandwidthCurve | None = None,
         model: str = "refined", **model_kw):
    """Measure (or reuse) the curve and the profile, then search: returns (TuneResult, profile, curve)."""
    profile = measure_gemm_profile(M, N, K, config=config, ctas=ctas)
    if curve is None:
        total = sum(profile.wave_bytes)
        curve = measure_curve(comm, primitive, default_sizes(total))
    result = OverlapModel(profile, curve, model, **model_kw).tune()
    return result, profile, curve


def all_to_all_wave_bytes(grid: TileGrid, routing, elem_bytes: int = 2) -> tuple[int, ...]:
    """Per wave, what the All-to-All really moves, in the units of a curve sampled with equal splits.

    A curve point of ``x`` bytes moves ``(W-1)/W * x`` off-rank; a wave whose rows go to ranks with
    skew moves ``sum_{d != r} bytes(r -> d)`` from rank ``r``, and the slowest rank decides (the paper
    takes the maximum over GPUs). So wave ``w`` counts as ``max_r off_rank(w, r) * W / (W-1)`` bytes:
    uniform routing gives the wave's output bytes, routing everything to itself gives ~0.
    """
    from .reorder import subtoken_reorder

    W = len(routing.dest)
    finest = (1,) * grid.num_waves
    if W == 1:
        return (1,) * grid.num_waves
    off = np.zeros((W, grid.num_waves), dtype=np.int64)
    for r in range(W):
        sent = subtoken_reorder(grid, finest, routing.dest, routing.dst_index, r).send_counts  # [T, W] elements
        off[r] = sent.sum(axis=1) - sent[:, r]
    worst = off.max(axis=0) * elem_bytes * W / (W - 1)
    return tuple(max(1, int(round(b))) for b in worst)


def slowest_rank(comm, med: dict) -> dict:
    """Per variant, the slowest rank's time (a collective op is as fast as its slowest rank); every
    rank gets the same numbers, so decisions taken on them agree. One process: ``med`` itself."""
    worst = getattr(comm, "max_over_ranks", None)
    if worst is None:
        return dict(med)
    names = sorted(med)
    return dict(zip(names, worst([med[n] for n in names])))


@dataclasses.dataclass(frozen=True)
class OverlapCheck:
    """The tuner's last step: the model picks a partition without running candidates, then this
    times that one choice against its non-overlapped fallback in a few short interleaved rounds and
    keeps it only if it wins: the model alone can lose on shapes where it promises only a few percent,
    and with this check no shape of the 2-GPU sweeps lost.

    ``rounds`` x ``inner`` calls of each (CUDA: device time between events; CPU: wall time). Every
    rank must call :meth:`keep` at the same point (it may run collectives); the slowest rank's
    times decide, so all ranks agree."""

    rounds: int = 3
    inner: int = 3

    def __post_init__(self) -> None:
        for name in ("rounds", "inner"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"OverlapCheck.{name} must be a positive integer, got {v!r}")

    def timings(self, comm, overlapped, fallback, *, device: str = "cuda") -> dict[str, float]:
        """``{"overlap": ms, "fallback": ms}``: median per call, the slowest rank's."""
        from statistics import median

        fns = {"overlap": lambda i: overlapped(), "fallback": lambda i: fallback()}
        if device == "cuda":
            from .testing import bench_interleaved, summarize
            med = summarize(bench_interleaved(fns, rounds=self.rounds, inner=self.inner, warmup=1))
        else:
            import time
            samples = {k: [] for k in fns}
            for r in range(self.rounds + 1):  # the first round warms up
                for name in (list(fns) if r % 2 else list(fns)[::-1]):
                    t0 = time.perf_counter()
                    for i in range(self.inner):
                        fns[name](i)
                    if r:
                        samples[name].append((time.perf_counter() - t0) / self.inner * 1e3)
            med = {k: median(v) for k, v in samples.items()}
        return slowest_rank(comm, med)

    def keep(self, comm, overlapped, fallback, *, device: str = "cuda") -> bool:
        """Whether the overlapped call beats the fallback (same result, so either may run)."""
        t = self.timings(comm, overlapped, fallback, device=device)
        return t["overlap"] < t["fallback"]
