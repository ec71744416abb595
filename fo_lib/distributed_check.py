"""Multi-process correctness of the overlapped ops against a dense float64 reference.

Run under torchrun, one process per rank (gloo on CPUs: the CI rehearsal; NCCL on GPUs)::

    torchrun --nproc_per_node 4 -m fo_lib.distributed_check --device cpu
    torchrun --nproc_per_node 8 -m fo_lib.distributed_check --device cuda

Every rank draws every rank's inputs from the same seeds, so each rank computes the exact dense
reference locally. Cases cover the three primitives, shapes with tails, random partitions, fused
post-ops, skewed All-to-All routing with empty destinations, the sequential and decomposition
baselines, ReduceScatter's AllGather restore, and a routing that disagrees across ranks (which must
raise at plan time on every rank, never hang). Exit status 0 only if every case passed on every rank.
"""
from __future__ import annotations

import argparse
import sys
import traceback

import numpy as np

from . import baselines, partition as part_mod
from .engine import OverlapPlan, PlanError, Routing
from .postops import PostOps
from .testing import calc_diff

OPS_CHOICES = [PostOps(), PostOps(bias=True, activation="silu"), PostOps(residual=True, rmsnorm=True, eps=1e-5)]


def make_cases(world_size: int, seed: int, count: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    cases = []
    for i in range(count):
        prim = ("all_reduce", "reduce_scatter", "all_to_all")[i % 3]
        # Every primitive meets every post-op; AllReduce takes turns: tiles, rows, and tiles reduced
        # by the post-reorder (an AllGather per group); ReduceScatter: in the collective, and reduced
        # by the post-reorder (an All-to-All per group).
        if prim == "all_reduce":
            variant = ("tiles", "rows", "gathered")[(i // 3) % 3]
        else:
            variant = ("tiles", "gathered")[(i // 3) % 2] if prim == "reduce_scatter" else "tiles"
        layout = "rows" if variant == "rows" else "tiles"
        cases.append(dict(primitive=prim, M=int(rng.integers(20, 300)), N=int(rng.integers(8, 260)),
                          K=int(8 * rng.integers(1, 9)), sms=int(rng.integers(2, 7)), seed=int(rng.integers(2**31)),
                          ops=(i + i // 3) % len(OPS_CHOICES), skew=float(rng.uniform(0.2, 3.0)),
                          empty_dest=bool(i % 2), layout=layout,
                          reduction="post_reorder" if variant == "gathered" else "collective"))
    return cases


def _routing(rng, W, M, skew, empty_dest):
    p = rng.dirichlet(np.full(W, skew))
    if empty_dest and W > 1:
        p[rng.integers(W)] = 0.0
        p /= p.sum()
    dest = [rng.choice(W, size=M, p=p) for _ in range(W)]
    return Routing.from_destinations(dest, shuffle_seed=int(rng.integers(2**31)))


def run_case(comm, case: dict, device: str, gather_comm=None) -> list[str]:
    """Run one case on this rank; returns failure messages (empty when it passed). ``gather_comm``:
    the communicator of the cases reduced by the post-reorder (default ``comm``)."""
    import torch

    from . import gemm

    reduction = case.get("reduction", "collective")
    if reduction == "post_reorder" and gather_comm is not None:
        comm = gather_comm

    W, rank = comm.world_size, comm.rank
    M, N, K = case["M"], case["N"], case["K"]
    rng = np.random.default_rng(case["seed"])
    layout = case.get("layout", "tiles")
    order = "row" if layout == "rows" else ("row", "col")[case["seed"] % 2]  # rows: bands of tile rows
    cfg = gemm.CONFIGS["64x64x32"].with_raster(order, 1 + case["seed"] % 3)
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    gen = torch.Generator().manual_seed(case["seed"])
    A = [torch.randn(M, K, generator=gen).bfloat16() for _ in range(W)]
    B = [torch.randn(N, K, generator=gen).bfloat16() for _ in range(W)]
    ops = OPS_CHOICES[case["ops"]]
    operands = {}
    if ops.bias:
        operands["bias"] = torch.randn(N, generator=gen).bfloat16()
    if ops.rmsnorm:
        operands["weight"] = (0.5 + torch.rand(N, generator=gen)).bfloat16()
    routing = _routing(rng, W, M, case["skew"], case["empty_dest"]) if case["primitive"] == "all_to_all" else None

    C = [a.double() @ b.double().T for a, b in zip(A, B)]
    dense = sum(C)  # the reduction every rank would see (AllReduce / ReduceScatter)
    plan_kw = dict(dtype="bf16", device=device, config=cfg, ctas=case["sms"], routing=routing, layout=layout,
                   reduction=reduction)
    if case["primitive"] == "reduce_scatter" and cfg.BM % W:
        # Subtiles need BM % W == 0: the plan must refuse clearly (and identically on every rank).
        try:
            OverlapPlan("reduce_scatter", M, N, K, comm, **plan_kw)
        except ValueError as exc:
            return [] if "divisible by the world size" in str(exc) else [f"unclear error: {exc}"]
        return [f"reduce_scatter with BM={cfg.BM} and W={W} was accepted"]
    T = _probe_waves(M, N, cfg, case["sms"])
    parts = list(part_mod.compositions(T)) if T <= 10 else [part_mod.finest(T), part_mod.no_overlap(T)]
    plan = OverlapPlan(case["primitive"], M, N, K, comm, partition=parts[int(rng.integers(len(parts)))], **plan_kw)
    if case["primitive"] == "reduce_scatter":
        dense_mine = dense[torch.from_numpy(plan.owned_rows)]
    elif case["primitive"] == "all_to_all":
        dense_mine = torch.zeros(plan.out_rows, N, dtype=torch.float64)
        for s in range(W):
            m = routing.dest[s] == rank
            dense_mine[torch.from_numpy(routing.dst_index[s][m])] = C[s][torch.from_numpy(np.flatnonzero(m))]
    else:
        dense_mine = dense
    if ops.residual:
        operands["residual"] = torch.randn(plan.out_rows, N, generator=gen).bfloat16()
    ref = baselines.torch_post_ops(dense_mine, ops, **{k: v.double() for k, v in operands.items()})
    on_dev = {k: v.to(dev) for k, v in operands.items()}
    a, b = A[rank].to(dev), B[rank].to(dev)
    failures = []
    tol = 3e-2
    label = (f"{case['primitive']} M={M} N={N} K={K} T={plan.grid.num_waves} partition={list(plan.partition)} "
             f"layout={layout} reduction={reduction} ops={ops}")
    variants = [("overlap", lambda: plan.run(a, b, ops=ops, **on_dev)),
                ("overlap again", lambda: plan.run(a, b, ops=ops, **on_dev))]
    if device == "cuda":  # the whole call captured as a CUDA graph (NCCL collectives inside), replayed twice
        graphed = plan.capture(a, b, ops=ops, **on_dev)
        variants += [("graph replay", lambda: graphed().clone()), ("graph replay again", lambda: graphed().clone()),
                     ("eager after graph", lambda: plan.run(a, b, ops=ops, **on_dev))]
    for name, fn in (*variants,
                     ("sequential", lambda: baselines.sequential(plan, a, b, ops=ops, **on_dev)),
                     ("decomposition", lambda: baselines.decomposition(plan, a, b, chunks=3, ops=ops, **on_dev))):
        got = fn()
        if device == "cuda":
            torch.cuda.synchronize()
            plan.check()
        if tuple(got.shape) != tuple(ref.shape):
            failures.append(f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)} [{label}]")
            continue
        err = calc_diff(got.cpu(), ref) if ref.numel() else 0.0
        if not err < tol:
            failures.append(f"{name}: rel. error {err:.3g} >= {tol} [{label}]")
    if case["primitive"] == "reduce_scatter" and not ops.residual and not ops.rmsnorm:
        full = plan.all_gather(plan.run(a, b))
        err = calc_diff(full.cpu(), dense)
        if not err < tol:
            failures.append(f"all_gather restore: rel. error {err:.3g} [{label}]")
    return failures


def _probe_waves(M, N, cfg, sms) -> int:
    return cfg.grid(M, N, sms).num_waves


def check_inconsistent_routing(comm, device: str) -> list[str]:
    """Ranks that disagree about the routing must all get a PlanError at plan time (no hang)."""
    from . import gemm

    W, rank = comm.world_size, comm.rank
    if W < 2:
        return []
    M, N, K = 96, 64, 16
    rng = np.random.default_rng(1000 + rank)  # deliberately different on every rank
    dest = [rng.integers(0, W, M) for _ in range(W)]
    try:
        OverlapPlan("all_to_all", M, N, K, comm, device=device, config=gemm.CONFIGS["64x64x32"], ctas=3,
                    routing=Routing.from_destinations(dest))
    except PlanError as exc:
        return [] if "routing differs" in str(exc) else [f"unexpected PlanError: {exc}"]
    return ["inconsistent routing was not detected on this rank"]


def check_modules(comm, device: str, seed: int = 7) -> list[str]:
    """The torch modules of :mod:`fo_lib.modules` against a dense reference, two token counts each
    (a plan per shape, reused on the second call of a shape)."""
    import torch

    from . import gemm
    from .modules import MoECombine, RowParallelLinear, SequenceParallelLinear
    from .partition_tuning import OverlapCheck

    W, rank = comm.world_size, comm.rank
    K, N = 48, 136
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    kw = dict(device=device, plan_kw=dict(config=gemm.CONFIGS["64x64x32"], ctas=3))
    failures = []
    rpl = RowParallelLinear(K, N, comm, bias=True, ops=PostOps(activation="gelu_tanh"), **kw)
    spl = SequenceParallelLinear(K, N, comm, check=OverlapCheck(rounds=1, inner=1), **kw)  # overlap or fallback
    moe = MoECombine(K, N, comm, **kw)
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(N, K, generator=gen).bfloat16() for _ in range(W)]
    bias = torch.randn(N, generator=gen).bfloat16()
    with torch.no_grad():
        for m in (rpl, spl, moe):
            m.weight.copy_(weights[rank])
        rpl.bias.copy_(bias)
    for M in (150, 150, 77):
        xs = [torch.randn(M, K, generator=gen).bfloat16() for _ in range(W)]
        C = [x.double() @ w.double().T for x, w in zip(xs, weights)]
        dense = sum(C)
        x = xs[rank].to(dev)
        got = rpl(x).cpu()
        want = baselines.torch_post_ops(dense, PostOps(bias=True, activation="gelu_tanh"), bias=bias.double())
        if not calc_diff(got, want) < 3e-2:
            failures.append(f"RowParallelLinear M={M}: rel. error {calc_diff(got, want):.3g}")
        local = spl(x)
        rows = torch.from_numpy(spl.owned_rows(M))
        if not calc_diff(local.cpu(), dense[rows]) < 3e-2:
            failures.append(f"SequenceParallelLinear M={M}: rel. error {calc_diff(local.cpu(), dense[rows]):.3g}")
        full = spl.gather(local, M).cpu()
        if not calc_diff(full, dense) < 3e-2:
            failures.append(f"SequenceParallelLinear.gather M={M}: rel. error {calc_diff(full, dense):.3g}")
        routing = _routing(np.random.default_rng(seed + M), W, M, 0.7, True)
        got = moe(x, routing).cpu()
        want = torch.zeros(got.shape, dtype=torch.float64)
        for src in range(W):
            m = routing.dest[src] == rank
            want[torch.from_numpy(routing.dst_index[src][m])] = C[src][torch.from_numpy(np.flatnonzero(m))]
        if got.numel() and not calc_diff(got, want) < 3e-2:
            failures.append(f"MoECombine M={M}: rel. error {calc_diff(got, want):.3g}")
    if len(rpl._cache.plans) != 2:
        failures.append(f"RowParallelLinear cached {len(rpl._cache.plans)} plans for 2 shapes")
    keeps = [float(p._module_keep) for p in spl._cache.plans.values()]  # timed per rank, decided together
    if comm.max_over_ranks(keeps) != keeps:
        failures.append(f"rank {rank}: the overlap check's decisions {keeps} differ from another rank's")
    return failures


def check_agreement(comm) -> list[str]:
    """The helpers that keep measuring ranks in step: rank 0's object everywhere, the slowest time."""
    W, rank = comm.world_size, comm.rank
    failures = []
    got = comm.broadcast_object({"from": rank, "partition": (1, 2, rank)})
    if got != {"from": 0, "partition": (1, 2, 0)}:
        failures.append(f"broadcast_object gave {got}")
    worst = comm.max_over_ranks([rank, -rank, 0.5 * rank])
    if worst != [W - 1, 0, 0.5 * (W - 1)]:
        failures.append(f"max_over_ranks gave {worst}")
    return failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--cases", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--copy-engine", action="store_true",
                    help="run the AllReduce cases reduced by the post-reorder on a communicator with NCCL's "
                         "zero-CTA policy (copy-engine AllGather, buffers in symmetric windows)")
    args = ap.parse_args(argv)
    from .comm.torch_dist import TorchDistCommunicator, init_from_env
    comm = init_from_env("gloo" if args.device == "cpu" else "nccl")
    gather_comm = TorchDistCommunicator(copy_engine=True) if args.copy_engine else None
    failures = []
    cases = make_cases(comm.world_size, args.seed, args.cases)
    for case in cases:
        try:
            failures += run_case(comm, case, args.device, gather_comm)
        except Exception:  # noqa: BLE001 - report and keep the ranks in step
            failures.append(f"{case}: {traceback.format_exc(limit=6)}")
            print(f"rank {comm.rank}: EXC {failures[-1]}", flush=True)
    failures += check_agreement(comm)
    try:
        failures += check_modules(comm, args.device)
    except Exception:  # noqa: BLE001 - report and keep the ranks in step
        failures.append(f"modules: {traceback.format_exc(limit=6)}")
    failures += check_inconsistent_routing(comm, args.device)
    import torch
    import torch.distributed as dist
    for f in failures:
        print(f"rank {comm.rank}: FAIL {f}", flush=True)
    status = torch.tensor([len(failures)], dtype=torch.int64, device="cuda" if args.device == "cuda" else "cpu")
    dist.all_reduce(status)
    if comm.rank == 0:
        ce = ", copy engine" if args.copy_engine else ""
        print(f"distributed_check: {len(cases)} cases x {comm.world_size} ranks ({comm.link}, {args.device}{ce}): "
              f"{'ok' if int(status) == 0 else f'{int(status)} failures'}", flush=True)
    from .comm.torch_dist import shutdown
    shutdown()
    return 0 if int(status) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
