"""One gloo rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment, as torchrun
sets them) of a fault case: the last rank stalls or dies, before or after building the plan; every
other rank must raise a named error within the plan's timeout and then exit. ``clean``: every rank
calls the plan once and exits.

    python tests/workers/rank_faults.py stall|die|stall-at-build|die-at-build|clean TIMEOUT_MS

A survivor prints ``ok <case> raised <error> after <s> s at <unix time>`` (or ``FAIL ...``) and
leaves the interpreter normally, so the test sees how long its exit takes.
"""
import os
import sys
import time

import torch

from fo_lib import gemm
from fo_lib.comm.torch_dist import init_from_env
from fo_lib.engine import CollectiveError, OverlapPlan


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(case: str, timeout_ms: float) -> None:
    comm = init_from_env("gloo")
    last = comm.rank == comm.world_size - 1
    if last and case == "die-at-build":
        os._exit(1)
    if last and case == "stall-at-build":
        time.sleep(600)

    def build():
        return OverlapPlan("all_reduce", 192, 128, 16, comm, device="cpu", config=gemm.CONFIGS["64x64x32"],
                           ctas=2, sm_count=2, timeout_ms=timeout_ms)

    t0 = time.time()
    try:
        plan = build()
    except CollectiveError as exc:
        if not case.endswith("at-build") or "plan fingerprints at build" not in str(exc):
            say(f"FAIL {case}: rank {comm.rank} raised {exc!r}")
        else:
            say(f"ok {case} raised CollectiveError after {time.time() - t0:.2f} s at {time.time():.3f}")
        return
    if last and case == "die":
        os._exit(1)
    if last and case == "stall":
        time.sleep(600)
    a, b = torch.ones(192, 16).bfloat16(), torch.ones(128, 16).bfloat16()
    if case == "clean":  # every rank calls; the process must then exit without an abort
        got = plan.run(a, b)
        want = 16.0 * comm.world_size
        say(f"ok clean (rank {comm.rank})" if bool((got.float() == want).all()) else f"FAIL clean: {got[0, :4]}")
        return
    t0 = time.time()
    try:
        plan.run(a, b)
        say(f"FAIL {case}: rank {comm.rank}'s call returned")
    except CollectiveError as exc:
        took = time.time() - t0
        ok = f"rank {comm.rank} of {comm.world_size}" in str(exc) and exc.__cause__ is not None
        say(f"ok {case} raised CollectiveError after {took:.2f} s at {time.time():.3f}" if ok
            else f"FAIL {case}: {exc}")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
