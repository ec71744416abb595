"""Call 21: one step of the hang hunt (call 20's LLM benchmark stopped at 5000 x 7168 x 8192, the
first shape whose tuning runs a stream-K config with runs of unequal length in a row raster).
    python call21_step.py LABEL M N K MODE   (MODE: eager | graph)"""
import sys
import time

import torch

from fo_lib.experiments.kernel_bench import config_variant
from fo_lib.gemm import autotune, sm90

label, M, N, K, mode = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
cfg = config_variant(sm90.CONFIGS, label, M)
sched = sm90.stream_k_schedule(cfg, M, N, K, 132)
a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
b = torch.randn(N, K, device="cuda").to(torch.bfloat16)
t0 = time.perf_counter()
if mode == "eager":
    out = sm90.gemm_nt(a, b, config=cfg)
    torch.cuda.synchronize()
    err = float((out.float() - a.float() @ b.float().T).abs().max())
    extra = f"max err {err:.3g}"
else:
    runs = sm90.tuning_runs([cfg], "bf16", a, b, 132)
    ms = autotune.time_launches(runs, rounds=3)
    extra = f"{list(ms.values())[0] * 1e3:.1f} us"
print(f"OK {label} {M}x{N}x{K} {mode} sk {sched[0]} split {sched[1]} unequal {sched[2] is not None} "
      f"{time.perf_counter() - t0:.2f} s {extra}", flush=True)
