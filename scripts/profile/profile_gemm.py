"""Launch the portable GEMM's epilogue variants once each on one shape, for Nsight Compute: plain,
scatter (row table, no signal), signal through the row table, signal_rows (no table) and signal
through the tile places (the engine's AllReduce store):

    ncu --clock-control none -k regex:fo_gemm_nt --launch-skip 3 --launch-count 5 \
        --section SpeedOfLight --section WarpStateStats \
        --metrics smsp__average_warps_issue_stalled_membar_per_issue_active.ratio \
        python3 scripts/profile/profile_gemm.py [--M 8192 --N 8192 --K 4096]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from fo_lib import gemm, reorder  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--M", type=int, default=8192)
    p.add_argument("--N", type=int, default=8192)
    p.add_argument("--K", type=int, default=4096)
    a_ = p.parse_args()
    M, N, K = a_.M, a_.N, a_.K
    a = torch.randn(M, K, device="cuda").bfloat16()
    b = torch.randn(N, K, device="cuda").bfloat16()
    sms = gemm.sm_count()
    cfg = gemm.default_config(M, N, K, sms)
    grid = cfg.grid(M, N, sms)
    plan = reorder.tile_reorder(grid, (1,) * grid.num_waves)
    ro = torch.from_numpy(plan.row_offset).cuda()
    tg = torch.from_numpy(plan.tile_group).cuda()
    cnt = torch.zeros(plan.num_groups, dtype=torch.int32, device="cuda")
    comm = torch.empty(M * N, dtype=torch.bfloat16, device="cuda")
    c = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    for _ in range(2):  # skipped launches: warm-up
        gemm.gemm_nt(a, b, c, config=cfg)
    gemm.gemm_nt_scatter(a, b, comm, ro, config=cfg)
    place = torch.from_numpy(plan.tile_place).cuda()
    gemm.gemm_nt(a, b, c, config=cfg)                                   # profiled 1: plain
    gemm.gemm_nt_scatter(a, b, comm, ro, config=cfg)                   # profiled 2: scatter
    gemm.gemm_nt_signal(a, b, comm, ro, tg, cnt, config=cfg)           # profiled 3: signal (row table)
    gemm.gemm_nt_signal(a, b, comm, None, tg, cnt, config=cfg)         # profiled 4: signal_rows
    gemm.gemm_nt_signal(a, b, comm, None, tg, cnt, config=cfg, tile_place=place)  # 5: signal_tiles
    torch.cuda.synchronize()
    print(f"profiled {cfg.tile_name} on {M}x{N}x{K}: plain, scatter, signal, signal_rows, signal_tiles")


if __name__ == "__main__":
    main()
