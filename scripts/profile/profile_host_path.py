"""Where the host time of an eager overlapped call goes, per piece, in microseconds.

The 2-GPU runs measured ~0.23 ms per wave group more for an eager call than for the same call
replayed as a CUDA graph. This times, on the host only (``time.perf_counter`` around the enqueue,
GPU kept busy so that nothing waits for it), each piece a call enqueues per group: the wait kernel's
launch, the collective's call, the NVTX range, and the whole eager call. Run it under torchrun for
NCCL, or alone for the loopback link:

    torchrun --nproc_per_node 2 scripts/profile/profile_host_path.py       # NCCL
    python scripts/profile/profile_host_path.py --world 2                    # loopback (one GPU)

Prints one table (rank 0); writes nothing. ``--profile`` also runs 200 eager calls (the default
path: communication side replayed as one graph) under cProfile and prints where they spend.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib.testing import host_and_gpu_time  # noqa: E402


def host_us(fn, calls: int = 50) -> float:
    return host_and_gpu_time(fn, calls=calls)[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=2, help="virtual ranks of the loopback link (no torchrun)")
    ap.add_argument("--shape", type=int, nargs=3, default=(4096, 8192, 8192))
    ap.add_argument("--profile", action="store_true", help="cProfile the eager call")
    args = ap.parse_args(argv)

    import torch

    from fo_lib import counting
    from fo_lib.engine import OverlapPlan

    if "RANK" in os.environ:
        from fo_lib.comm.torch_dist import init_from_env
        comm = init_from_env("nccl")
    else:
        from fo_lib.comm.loopback import LoopbackCommunicator
        comm = LoopbackCommunicator(args.world)
    M, N, K = args.shape
    plan = OverlapPlan("all_reduce", M, N, K, comm)
    a = torch.randn(M, K, device="cuda").bfloat16()
    b = torch.randn(N, K, device="cuda").bfloat16()
    groups = plan.num_groups
    small = plan.send[: plan.slices[0]["send"][1]]
    stream = plan.executor.comm_stream
    pieces = {}

    def wait_launch():  # a wait that is already satisfied (target 0)
        counting.wait_counter(plan.executor.counters, 0, 0, plan.executor.error, plan.timeout_ns, stream=stream)

    def collective():
        with torch.cuda.stream(stream):
            comm.all_reduce(small)

    def nvtx():
        torch.cuda.nvtx.range_push("fo group")
        torch.cuda.nvtx.range_pop()

    pieces["wait kernel launch (per group)"] = host_us(wait_launch)
    pieces[f"collective call on one group's slice (per group, {small.numel() * 2 / 2**20:.1f} MiB)"] = host_us(collective)
    pieces["NVTX range (per group)"] = host_us(nvtx)
    per_group = OverlapPlan("all_reduce", M, N, K, comm, comm_graph=False)
    pieces[f"whole call, group by group ({groups} groups)"] = host_us(lambda: per_group.run(a, b), calls=10)
    pieces["whole call, communication side replayed as one graph (default)"] = host_us(lambda: plan.run(a, b), calls=10)
    graphed = plan.capture(a, b)
    pieces["whole call as a CUDA-graph replay"] = host_us(graphed, calls=10)
    torch.cuda.synchronize()
    plan.check()
    per_group.check()
    if comm.rank == 0:
        print(f"host time per piece, us ({comm.link}, world {comm.world_size}, {M}x{N}x{K}, "
              f"{torch.cuda.get_device_name()}):")
        for name, us in pieces.items():
            print(f"  {us:9.1f}  {name}")
        extra = (pieces[f"whole call, group by group ({groups} groups)"] - pieces["whole call as a CUDA-graph replay"]) / groups
        print(f"  {extra:9.1f}  group by group minus whole graph, per group")
    if args.profile:  # every rank runs the calls (NCCL collectives must match); rank 0 prints
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            plan.run(a, b)
        prof.disable()
        torch.cuda.synchronize()
        plan.check()
        if comm.rank == 0:
            print("cProfile, 200 eager calls:")
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    graphed = plan = per_group = None  # drop the captured graphs before the process group goes
    if "RANK" in os.environ:
        from fo_lib.comm.torch_dist import shutdown
        shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
