"""Call 22 (branch idle-warpgroup): one variant of the LLM benchmark's row of 5000 x 7168 x 8192 as
its rounds time it (gemm_nt through the launch memo, CUDA graphs of 3 calls on rotating input sets,
30 shuffled rounds beside cuBLAS), in a process of its own, so a hang names its variant.
    python call22_variant.py LABEL [EPILOGUE] [COST]   (EPILOGUE: plain | signal; COST: the idle tile cost)"""
import sys
import time

import torch

from fo_lib.experiments.kernel_bench import config_variant, input_sets
from fo_lib.gemm import sm90
from fo_lib.testing import bench_interleaved, summarize, tile_tables

label = sys.argv[1]
epilogue = sys.argv[2] if len(sys.argv) > 2 else "plain"
if len(sys.argv) > 3:
    sm90.IDLE_WARPGROUP_TILE_COST = float(sys.argv[3])
M, N, K = 5000, 7168, 8192
cfg = config_variant(sm90.CONFIGS, label, M)
sets = input_sets(M, N, K, torch.bfloat16)
n = len(sets)
if epilogue == "signal":
    ro, tg, cnt, _ = tile_tables(M, N, cfg, 132)
    comm = [torch.empty(M * N, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    fn = lambda i: sm90.gemm_nt_signal(sets[i % n][0], sets[i % n][1], comm[i % 2], ro, tg, cnt, config=cfg)  # noqa: E731
else:
    fn = lambda i: sm90.gemm_nt(*sets[i % n], config=cfg)  # noqa: E731
fns = {label: fn, "torch": lambda i: torch.matmul(sets[i % n][0], sets[i % n][1].T, out=sets[i % n][2])}
t0 = time.perf_counter()
ms = summarize(bench_interleaved(fns, rounds=30, inner=3, warmup=2, graph=True, order="shuffle", seed=0))
sched = sm90.stream_k_schedule(cfg, M, N, K, 132)
print(f"OK {label} {epilogue} sk {sched[0]} split {sched[1]} unequal {sched[2] is not None}: "
      f"{ms[label] * 1e3:.1f} us, cuBLAS {ms['torch'] * 1e3:.1f} us ({time.perf_counter() - t0:.1f} s)", flush=True)
