"""Offline measurements that feed the predictor (GPU).

* :func:`measure_gemm_profile`: per-wave durations of the signaled GEMM's tile schedule from the
  probe epilogue's per-tile ``%globaltimer`` stamps, plus the plain GEMM on every SM.
* :func:`measure_curve`: latency of one collective against message size on a communicator.
* :func:`tune`: both, then the exact partition search of :mod:`fo_lib.predictor`.

Results are :class:`fo_lib.profiles.GemmProfile` / :class:`~fo_lib.profiles.BandwidthCurve`, which
save to and load from versioned JSON.
"""
from __future__ import annotations

import dataclasses
import statistics

import numpy as np

from .predictor import OverlapModel
from .profiles import BandwidthCurve, GemmProfile
from .tiling import TileGrid


def _torch():
    import torch
    return torch


def _event_ms(fn, repeats: int, warmup: int = 2) -> float:
    torch = _torch()
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return float(statistics.median(times))


def wave_durations(probe: np.ndarray, grid: TileGrid) -> np.ndarray:
    """Per-wave durations (ms) from probe stamps ``[tiles, 4]`` (start ns, end ns, smid, cta):
    wave ``w`` ends when its last tile ends; wave 0 starts at the first tile's start."""
    end = probe[:, 1].astype(np.int64)
    wave_end = np.array([end[grid.wave_tiles(w)].max() for w in range(grid.num_waves)], dtype=np.float64)
    start = float(probe[:, 0].min())
    return np.diff(np.concatenate(([start], wave_end))) / 1e6


def measure_gemm_profile(M: int, N: int, K: int, *, config=None, ctas: int | None = None, comm_sms: int = 0,
                         dtype: str = "bf16", repeats: int = 5) -> GemmProfile:
    torch = _torch()
    from . import gemm

    sms = gemm.sm_count()
    config = config or gemm.default_config(M, N, K, sms)
    ctas = ctas or sms - comm_sms
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    a = torch.randn(M, K, device="cuda").to(tdtype)
    b = torch.randn(N, K, device="cuda").to(tdtype)
    grid = config.grid(M, N, ctas)
    runs = []
    for _ in range(repeats + 1):
        _, probe = gemm.gemm_nt_probe(a, b, config=config, ctas=ctas)
        torch.cuda.synchronize()
        runs.append(wave_durations(probe.cpu().numpy(), grid))
    waves = np.median(np.stack(runs[1:]), axis=0)  # the first run pays for loading the kernel
    out = torch.empty(M, N, dtype=tdtype, device="cuda")
    full = _event_ms(lambda: gemm.gemm_nt(a, b, out, config=config), repeats)
    # The probe's clock reads add a little: scale the waves to the signaled GEMM's event time.
    ro = torch.zeros(M, grid.tiles_n, dtype=torch.int64, device="cuda")
    ro += torch.arange(M, device="cuda")[:, None] * N + torch.arange(grid.tiles_n, device="cuda")[None, :] * config.BN
    tg = torch.zeros(grid.num_tiles, dtype=torch.int32, device="cuda")
    cnt = torch.zeros(1, dtype=torch.int32, device="cuda")
    buf = torch.empty(M * N, dtype=tdtype, device="cuda")
    signal_ms = _event_ms(lambda: gemm.gemm_nt_signal(a, b, buf, ro, tg, cnt, config=config, ctas=ctas), repeats)
    waves = waves * (signal_ms / waves.sum())
    elem = torch.finfo(tdtype).bits // 8
    return GemmProfile(M=M, N=N, K=K, dtype=dtype, config=dataclasses.asdict(config),
                       sm_count=sms, comm_sms=sms - ctas if ctas <= sms else 0, ctas=ctas,
                       wave_ms=tuple(float(w) for w in waves),
                       wave_bytes=tuple(int(x) * elem for x in grid.wave_elements()), full_ms=full,
                       gpu=torch.cuda.get_device_name())


def measure_curve(comm, primitive: str, sizes_bytes, *, dtype: str = "bf16", repeats: int = 5) -> BandwidthCurve:
    """Median latency of ``primitive`` on ``comm`` for each message size (bytes handed to the collective)."""
    torch = _torch()
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    elem = torch.finfo(tdtype).bits // 8
    W = comm.world_size
    points = []
    for nbytes in sorted(set(int(s) for s in sizes_bytes)):
        n = max(W, nbytes // elem // W * W)
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
        points.append((float(n * elem), _event_ms(fn, repeats)))
    return BandwidthCurve(tuple(points), primitive=primitive, world_size=W, link=comm.link,
                          meta={"gpu": torch.cuda.get_device_name()})


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
