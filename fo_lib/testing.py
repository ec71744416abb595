"""Correctness and benchmark helpers shared by tests, scripts and notebooks.

* :func:`calc_diff`: relative Frobenius error against a float64 reference (NaN never passes).
* :func:`bench_interleaved`: time several variants in interleaved rounds (A, B, C, A, B, C, ...)
  with CUDA events and report per-variant samples, so a power-capped GPU's clock drift hits every
  variant alike. Compare medians only within one call.
* :func:`tile_tables`: the AllReduce signal tables on the GPU, for benchmarks and profiles of the
  signalling GEMM outside a plan.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping

import numpy as np

from . import jit


def calc_diff(x, ref) -> float:
    """``||x - ref|| / ||ref||`` in float64; ``inf`` if ``x`` holds NaN/Inf or shapes differ."""
    x = _to_numpy(x)
    ref = _to_numpy(ref)
    if x.shape != ref.shape:
        raise ValueError(f"shape mismatch: {x.shape} vs reference {ref.shape}")
    if not np.all(np.isfinite(x)):
        return float("inf")
    denom = np.linalg.norm(ref)
    num = np.linalg.norm(x - ref)
    return float(num / denom) if denom > 0 else float(num)


def _to_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor, any device/dtype
        return x.detach().to("cpu").double().numpy()
    if hasattr(x, "get"):  # cupy array
        x = x.get()
    return np.asarray(x, dtype=np.float64)


def median(samples) -> float:
    return float(statistics.median(samples))


def _flat_ints(seed):
    """``seed`` as a flat sequence of ints: callers nest their own seed inside a per-shape tuple."""
    if isinstance(seed, (tuple, list)):
        for s in seed:
            yield from _flat_ints(s)
    else:
        yield int(seed)


def round_orders(names, rounds: int, order: str = "alternate", seed=0) -> list[list]:
    """The order of ``names`` in each of ``rounds`` rounds: ``"alternate"``, the given order reversed
    every other round; ``"shuffle"``, a random permutation per round drawn from
    ``numpy.random.default_rng(seed)`` (``seed``: anything it takes, e.g. a tuple of ints)."""
    names = list(names)
    if order == "alternate":
        return [names if r % 2 == 0 else names[::-1] for r in range(rounds)]
    if order == "shuffle":
        rng = np.random.default_rng(list(_flat_ints(seed)))
        return [[names[j] for j in rng.permutation(len(names))] for _ in range(rounds)]
    raise ValueError(f"order must be 'alternate' or 'shuffle', got {order!r}")


def bench_interleaved(fns: Mapping[str, Callable[[int], object]], *, rounds: int = 30,
                      inner: int = 5, warmup: int = 3, stream=None, graph: bool = False,
                      order: str = "alternate", seed=0, record: list | None = None,
                      capture_error_mode: str = "global", settle_s: float = 0.0) -> dict[str, list[float]]:
    """Time ``fns`` (each called as ``fn(i)``, ``i`` the call index for input rotation).

    Each round runs every variant ``inner`` times back to back between two CUDA events and records
    the mean per call in ms, the variants in the order :func:`round_orders` gives (``order``,
    ``seed``). ``"shuffle"`` (a random order per round) keeps any variant from holding one place and
    one neighbour in every round: on a power-capped GPU the clock drifts within a round, and in the
    alternating order the same kernel timed twice differed by a few percent on long shapes.
    With ``graph=True`` each variant's ``inner`` calls are captured once in a CUDA graph
    (``capture_error_mode`` as ``torch.cuda.graph`` takes it) and the rounds replay it on ``stream``:
    the host's launch of each call is not timed, one graph launch per replay is (the stream is idle
    when a round's events start). Returns ``{name: [ms per round]}``;
    ``record``, a list, also receives ``(round, place in the round, name, ms)`` per measurement.
    ``settle_s``: seconds the GPU idles before the first round (after the warmup and the captures),
    for a power limiter still holding the clocks down after earlier work to let them go.
    """
    import torch

    names = list(fns)
    orders = round_orders(names, rounds, order, seed)
    stream = stream or torch.cuda.current_stream()
    calls = 0
    for _ in range(warmup):
        for name in names:
            for _ in range(inner):
                fns[name](calls)
                calls += 1
    torch.cuda.synchronize()
    graphs = {}
    if graph:
        side = torch.cuda.Stream()
        for name in names:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.stream(side), jit.capture_graph(g, stream=side, capture_error_mode=capture_error_mode):
                for i in range(inner):
                    fns[name](i)
            graphs[name] = g
        torch.cuda.synchronize()
    if settle_s > 0:
        time.sleep(settle_s)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r, round_order in enumerate(orders):
        for place, name in enumerate(round_order):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            if graph:
                with torch.cuda.stream(stream):
                    graphs[name].replay()
            else:
                for _ in range(inner):
                    fns[name](calls)
                    calls += 1
            end.record(stream)
            end.synchronize()
            out[name].append(start.elapsed_time(end) / inner)
            if record is not None:
                record.append((r, place, name, out[name][-1]))
    return out


def host_and_gpu_time(fn, *, calls: int = 30, rounds: int = 5, sleep_cycles: int = 50_000_000) -> tuple[float, float]:
    """``(host us, GPU ms)`` per call of ``fn``, medians over ``rounds``: the host time is that of
    enqueueing ``calls`` back-to-back calls while the GPU is still busy with a sleep of
    ``sleep_cycles`` clock cycles (~25 ms by default: no launch ever waits for the GPU), the GPU time
    that of running them (events after the sleep), free of the host's launch cost."""
    import time

    import torch

    host, gpu = [], []
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda._sleep(sleep_cycles)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        host.append((time.perf_counter() - t0) / calls * 1e6)
        end.record()
        end.synchronize()
        gpu.append(start.elapsed_time(end) / calls)
    return median(host), median(gpu)


def summarize(samples: Mapping[str, list[float]]) -> dict[str, float]:
    """Median ms per variant."""
    return {name: median(v) for name, v in samples.items()}


def tile_tables(M, N, cfg, ctas, groups=None):
    """The AllReduce (tile) tables the engine would use, as CUDA tensors ``(row_offset, tile_group,
    group counters, tile_place)``: one group per wave (the finest partition: a release per tile and
    the most scattered slices), or the waves split into ``groups`` groups as evenly as possible
    (later groups take the remainder, as the tuner's growing groups do)."""
    import torch

    from . import reorder

    grid = cfg.grid(M, N, ctas)
    if groups is None:
        part = (1,) * grid.num_waves
    else:
        g = min(groups, grid.num_waves)
        part = tuple(grid.num_waves // g + (i >= g - grid.num_waves % g) for i in range(g))
    plan = reorder.tile_reorder(grid, part)
    return (torch.from_numpy(plan.row_offset).cuda(), torch.from_numpy(plan.tile_group).cuda(),
            torch.zeros(plan.num_groups, dtype=torch.int32, device="cuda"), torch.from_numpy(plan.tile_place).cuda())


def random_tile_layout(R: int, N: int, BM: int, BN: int, rng, *, shift: int = 0, gap: int = 0):
    """A random FlashOverlap-like buffer layout for tests and benchmarks: the ``BM x BN`` tiles of
    ``[R, N]`` stored row-major one after another in a random slot order, with random gaps of
    ``0..2 * gap`` elements between them, everything moved by ``shift``. Returns
    ``(table [R, ceil(N/BN)] int64, buffer elements)`` in the format of :mod:`fo_lib.reorder`."""
    tm_n, tn_n = -(-R // BM), -(-N // BN)
    base = np.empty(tm_n * tn_n, dtype=np.int64)
    pos = shift
    for tile in rng.permutation(tm_n * tn_n):
        tm, tn = divmod(int(tile), tn_n)
        pos += gap * int(rng.integers(0, 3)) if gap else 0
        base[tile] = pos
        pos += min(BM, R - tm * BM) * min(BN, N - tn * BN)
    r = np.arange(R)[:, None]
    tn = np.arange(tn_n)[None, :]
    table = base[(r // BM) * tn_n + tn] + (r % BM) * np.minimum(BN, N - tn * BN)
    return np.ascontiguousarray(table, dtype=np.int64), pos + gap
