"""Which cuBLAS kernel torch.matmul runs for each LLM shape of bench_gemm_sm90_llm.py (the kernel
name carries its tile, cluster and schedule): a CSV of (M, N, K, kernel, grid). An experiment for
issue 23.

    python scripts/profile/cublas_kernels.py --out /tmp/cublas_kernels.csv
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    from bench_gemm_sm90_llm import SHAPES

    rows = []
    for origin, M, N, K in SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        torch.matmul(a, w.T)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.matmul(a, w.T)
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        rows.append(dict(M=M, N=N, K=K, origin=origin, kernels=" | ".join(names)))
        print(f"{M:6d} {N:6d} {K:6d}  {' | '.join(names)}", flush=True)
    import pandas as pd

    from fo_lib.provenance import write_result
    write_result(pd.DataFrame(rows), args.out, dtype="bf16", what="torch.matmul(a, w.T) kernel names (torch.profiler)")


if __name__ == "__main__":
    main()
