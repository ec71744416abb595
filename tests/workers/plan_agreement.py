"""torchrun worker (gloo): plans that differ across ranks in one fingerprint field must make every
rank raise a PlanError naming that field with every rank's value; a stalled peer must make a call
raise a CollectiveError naming the plan, the group and the rank within the plan's timeout; ranks
calling different plans (or one rank refusing its inputs) must make every rank's call raise a
PlanError, after which the plans still run.

    torchrun --nproc_per_node 3 tests/workers/plan_agreement.py mismatch
    torchrun --nproc_per_node 2 tests/workers/plan_agreement.py stall
    torchrun --nproc_per_node 3 tests/workers/plan_agreement.py mixed

Prints one ``ok <case>`` or ``FAIL <case>: ...`` line per case and rank.
"""
import os
import sys
import time

import numpy as np
import torch

from fo_lib import gemm
from fo_lib.comm.torch_dist import init_from_env, shutdown
from fo_lib.engine import CollectiveError, OverlapPlan, PlanError, Routing

CFG = gemm.CONFIGS["64x64x32"]
ROWS = CFG.with_raster("row", 1)
BASE = dict(primitive="all_to_all", M=192, N=128, K=16, dtype="bf16", config=CFG, ctas=2,
            schedule="persistent", partition=None, layout="tiles", reduction="collective")


def say(line: str) -> None:
    """One write per line: the ranks share the pipe, and print() writes the newline apart."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def routing(W, M, seed=0):
    return Routing.from_destinations([np.random.default_rng(seed + s).integers(0, W, M) for s in range(W)])


def mismatches(W):
    """(field, the base plan's changes for every rank, the last rank's changes)."""
    ar = dict(primitive="all_reduce")
    return [
        ("primitive", {}, ar),
        ("M", {}, dict(M=160)),
        ("N", {}, dict(N=192)),
        ("K", {}, dict(K=24)),
        ("dtype", {}, dict(dtype="f16")),
        ("config", {}, dict(config=CFG.with_raster("col", 1))),
        ("schedule", {}, dict(schedule="per_tile")),
        ("ctas", {}, dict(ctas=3)),
        ("partition", dict(partition=(1, 1, 1)), dict(partition=(2, 1))),
        ("layout", dict(ar, config=ROWS), dict(layout="rows")),
        ("reduction", ar, dict(reduction="post_reorder")),
        ("routing", {}, dict(routing_seed=5)),
        # Equal in every field above, but each rank counts waves over its own SMs: 6 tiles make two
        # waves of 4 + 2 on 4 SMs and of 5 + 1 on 5, so the groups' slices differ.
        ("grid", dict(ar, schedule="per_tile", sm_count=4), dict(sm_count=5)),
    ]


def build(comm, spec):
    spec = dict(spec)
    prim, M, N, K = (spec.pop(k) for k in ("primitive", "M", "N", "K"))
    seed = spec.pop("routing_seed", 0)
    spec.setdefault("sm_count", 2)
    if prim == "all_to_all":
        spec["routing"] = routing(comm.world_size, M, seed)
    return OverlapPlan(prim, M, N, K, comm, device="cpu", **spec)


def check_mismatches(comm):
    W, rank = comm.world_size, comm.rank
    for field, common, last in mismatches(W):
        spec = {**BASE, **common, **(last if rank == W - 1 else {})}
        try:
            build(comm, spec)
            say(f"FAIL {field}: rank {rank} built its plan")
            continue
        except PlanError as exc:
            msg = str(exc)
        want = [f"{field} differs"] + [f"rank {r}: " for r in range(W)]
        if not all(w in msg for w in want) or msg.count(f"rank {W - 1}: ") != 1:
            say(f"FAIL {field}: rank {rank} raised {msg!r}")
            continue
        shown = {"M": "160", "N": "192", "K": "24", "dtype": "f16", "ctas": "3", "schedule": "per_tile",
                 "partition": "(2, 1)", "layout": "rows", "reduction": "post_reorder", "primitive": "all_reduce"}
        if field in shown and f"rank {W - 1}: {shown[field]}" not in msg:
            say(f"FAIL {field}: rank {rank} does not show the last rank's value: {msg!r}")
            continue
        if field in shown and f"rank 0: {shown[field]}" in msg:
            say(f"FAIL {field}: rank 0's value shown wrong: {msg!r}")
            continue
        say(f"ok {field} (rank {rank})")
    # A rank whose own build fails still takes part in the exchange: it raises its own error, every
    # other rank a PlanError naming it, and nobody waits in a collective.
    try:
        build(comm, {**BASE, "primitive": "all_reduce", **(dict(partition=(9,)) if rank == W - 1 else {})})
        say(f"FAIL early failure: rank {rank} built its plan")
    except PlanError as exc:
        if rank == W - 1:  # its own error: the partition that misses the GEMM's waves
            ok = "covers 9 waves" in str(exc) and "another rank" not in str(exc)
        else:
            ok = f"rank {W - 1}: PlanError" in str(exc) and "could not build" in str(exc)
        say(f"ok early failure (rank {rank})" if ok else f"FAIL early failure: rank {rank} raised {exc!r}")
    # The group is still in step after every refusal: an agreeing plan runs and gives the sum.
    plan = build(comm, {**BASE, "primitive": "all_reduce"})
    gen = torch.Generator().manual_seed(1)
    a = [torch.randn(192, 16, generator=gen).bfloat16() for _ in range(W)]
    b = [torch.randn(128, 16, generator=gen).bfloat16() for _ in range(W)]
    want = sum(x.double() @ y.double().T for x, y in zip(a, b))
    got = plan.run(a[rank], b[rank]).double()
    err = float((got - want).norm() / want.norm())
    say(f"ok agreeing plan (rank {rank})" if err < 2e-2 else f"FAIL agreeing plan: rel. error {err:.3g}")


def check_stall(comm):
    """Rank 1 builds the plan, then never calls it; rank 0's call must fail within its timeout."""
    plan = build(comm, {**BASE, "primitive": "all_reduce", "timeout_ms": 1500.0})
    if comm.rank == 1:
        time.sleep(8)
        say("ok stall (the stalled rank)")
        os._exit(0)
    a, b = torch.ones(192, 16).bfloat16(), torch.ones(128, 16).bfloat16()
    t0 = time.perf_counter()
    try:
        plan.run(a, b)
        say("FAIL stall: the call returned")
    except CollectiveError as exc:
        took = time.perf_counter() - t0
        msg = str(exc)
        want = ["rank 0 of 2", "group 1 of", "all_reduce 192x128x16", "timeout 1.5 s"]
        missing = [w for w in want if w not in msg]
        if missing or exc.__cause__ is None or took > 6:
            say(f"FAIL stall: after {took:.1f} s, missing {missing}, cause {exc.__cause__!r}: {msg}")
        else:
            say(f"ok stall after {took:.1f} s: {msg}")
    # The timed-out collective may still complete later against the plan's buffers: the plan
    # refuses every further call.
    try:
        plan.run(a, b)
        say("FAIL stall: the plan ran again after a failed collective")
    except PlanError as exc:
        say("ok broken plan refuses" if "failed before" in str(exc) else f"FAIL stall: {exc!r}")
    os._exit(0)


def mixed_plans(comm):
    """Plans A (M = 512, two groups) and B (M = 1024, four groups) of the same group size: their
    collectives pair up when one rank calls A and another B, so only the per-call check tells."""
    spec = {**BASE, "primitive": "all_reduce", "N": 128, "K": 16}
    return (build(comm, {**spec, "M": 512, "partition": (4, 4)}),
            build(comm, {**spec, "M": 1024, "partition": (4, 4, 4, 4)}))


def check_mixed(comm):
    """Rank 0 calls A then B, every other rank B then A: each call must raise on every rank, naming
    both plans; then every rank calls A, then B, and gets the sum (no plan left unusable)."""
    W, rank = comm.world_size, comm.rank
    plans = mixed_plans(comm)
    gen = torch.Generator().manual_seed(2)
    ops = {M: ([torch.randn(M, 16, generator=gen).bfloat16() for _ in range(W)],
               [torch.randn(128, 16, generator=gen).bfloat16() for _ in range(W)]) for M in (512, 1024)}
    order = (0, 1) if rank == 0 else (1, 0)
    for i in order:
        plan = plans[i]
        try:
            plan.run(ops[plan.M][0][rank], ops[plan.M][1][rank])
            say(f"FAIL mixed: rank {rank}'s call of M={plan.M} returned")
        except PlanError as exc:
            msg = str(exc)
            want = ["called different plans", "512x128x16", "1024x128x16", "partition [4, 4]",
                    "partition [4, 4, 4, 4]"] + [f"rank {r}: run of" for r in range(W)]
            missing = [w for w in want if w not in msg]
            say(f"FAIL mixed: rank {rank} missing {missing}: {msg}" if missing else f"ok mixed (rank {rank})")
    # A rank that refuses its inputs (a weight that requires grad) tells the others; nobody waits.
    a, b = ops[512][0][rank], ops[512][1][rank]
    try:
        plans[0].run(a, b.clone().requires_grad_() if rank == W - 1 else b)
        say(f"FAIL refused: rank {rank}'s call returned")
    except PlanError as exc:
        ok = "require grad" in str(exc) if rank == W - 1 else f"rank(s) [{W - 1}] refused" in str(exc)
        say(f"ok refused (rank {rank})" if ok else f"FAIL refused: rank {rank}: {exc}")
    for plan in plans:
        x, y = ops[plan.M]
        want = sum(p.double() @ q.double().T for p, q in zip(x, y))
        err = float((plan.run(x[rank], y[rank]).double() - want).norm() / want.norm())
        say(f"ok usable M={plan.M} (rank {rank})" if err < 2e-2 else f"FAIL usable M={plan.M}: rel. error {err:.3g}")


if __name__ == "__main__":
    comm = init_from_env("gloo")
    if sys.argv[1] == "mismatch":
        check_mismatches(comm)
        shutdown()
    elif sys.argv[1] == "mixed":
        check_mixed(comm)
        shutdown()
    else:
        check_stall(comm)
