"""Host time per eager launch of our kernels next to torch.matmul, in microseconds.

Each call is enqueued while the GPU is still busy (fo_lib.testing.host_and_gpu_time), so the time is
the host's alone; the GPU time per call is printed beside it. Where the host time exceeds the GPU
time, back-to-back eager calls are host-bound (a benchmark that times eager calls then measures the
launch path, not the kernel). With ``--profile`` the slowest launch path is also run under cProfile.

    python scripts/bench/bench_launch.py --out launch.csv [--shape 2048 4096 4096] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="CSV file to write (with a provenance sidecar)")
    ap.add_argument("--shape", type=int, nargs=3, default=(2048, 4096, 4096))
    ap.add_argument("--profile", action="store_true", help="cProfile the sm90 (or portable) plain launch")
    args = ap.parse_args(argv)

    import pandas as pd
    import torch

    from fo_lib import gemm, postops, reorder
    from fo_lib.gemm import sm90 as gemm_sm90
    from fo_lib.provenance import write_result
    from fo_lib.testing import host_and_gpu_time

    M, N, K = args.shape
    a = torch.randn(M, K, device="cuda").bfloat16()
    b = torch.randn(N, K, device="cuda").bfloat16()
    out = torch.empty(M, N, device="cuda").bfloat16()
    sms = gemm.sm_count()
    fns = {"torch.matmul": lambda: torch.matmul(a, b.T, out=out)}
    families = [("portable", gemm.PORTABLE, gemm.default_config(M, N, K, sms))]
    if gemm_sm90.is_supported():
        families.append(("sm90", gemm_sm90.SM90, gemm_sm90.default_config(M, N, K, sms)))
    for name, fam, cfg in families:
        grid = cfg.grid(M, N, sms)
        tables = reorder.tile_reorder(grid, (1,) * grid.num_waves)
        ro = torch.from_numpy(tables.row_offset).cuda()
        tg = torch.from_numpy(tables.tile_group).cuda()
        cnt = torch.zeros(tables.num_groups, dtype=torch.int32, device="cuda")
        comm = torch.empty(M * N, device="cuda").bfloat16()
        fns[f"{name} plain"] = (lambda f, c: lambda: f.gemm_nt(a, b, out, config=c))(fam, cfg)
        fns[f"{name} signal"] = (lambda f, c, ro, tg, cnt, comm: lambda: f.gemm_nt_signal(
            a, b, comm, ro, tg, cnt, config=c))(fam, cfg, ro, tg, cnt, comm)
    pgrid = families[0][2].grid(M, N, sms)
    ident = torch.from_numpy(reorder.row_reorder(pgrid, (pgrid.num_waves,)).row_offset).cuda()
    fns["post_reorder (identity)"] = lambda: postops.post_reorder(out.view(-1), ident, (M, N), families[0][2].BN,
                                                                  out=torch.empty_like(out))
    rows = []
    for name, fn in fns.items():
        fn()
        host_us, gpu_ms = host_and_gpu_time(fn, calls=30, rounds=5)
        rows.append(dict(M=M, N=N, K=K, call=name, host_us=round(host_us, 1), gpu_us=round(gpu_ms * 1e3, 1),
                         host_bound=host_us > gpu_ms * 1e3))
        print(f"{name:>26}: host {host_us:7.1f} us, GPU {gpu_ms * 1e3:7.1f} us", flush=True)
    write_result(pd.DataFrame(rows), args.out, link="none", dtype="bf16")
    if args.profile:
        name = f"{families[-1][0]} plain"
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            fns[name]()
        prof.disable()
        torch.cuda.synchronize()
        print(f"cProfile, 200 launches of {name}:")
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
