"""Run every kernel family once on small shapes, for compute-sanitizer.

    compute-sanitizer --tool memcheck  python3 scripts/profile/sanitize_kernels.py
    compute-sanitizer --tool racecheck python3 scripts/profile/sanitize_kernels.py
    compute-sanitizer --tool memcheck  python3 scripts/profile/sanitize_kernels.py --sm90   # the sm_90a GEMM only
    compute-sanitizer --tool synccheck python3 scripts/profile/sanitize_kernels.py --sm90 --stream-k  # its stream-K tails only

Shapes have tails in M and N so predicated loads/stores are exercised; results are checked too,
so a silent wrong answer fails as well. Prints 'sanitize: ok' at the end.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from fo_lib import counting, gemm, postops, reorder  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402


def exercise(family, configs, shapes) -> None:
    """Every epilogue of one GEMM family (plain, signal, scatter, probe, signal_rows, signal_tiles) on few CTAs, then the
    post-reorder with every fused op back to row-major; results checked against float64."""
    torch.manual_seed(0)
    for cfg in configs:
        tail = "+sk" if getattr(cfg, "stream_k", False) else ""
        print(f"sanitize: {cfg.tile_name}{tail}", flush=True)  # how far a cut-off run got
        for M, N, K in shapes:
            # Clusters: pairs down a tile column share B; an odd last band's, along its row, share A.
            cfg = cfg.with_raster("row", 2)
            ctas = 3 if cfg.cluster == 1 else 4  # clusters of 2: an even count
            a = torch.randn(M, K, device="cuda").bfloat16()
            b = torch.randn(N, K, device="cuda").bfloat16()
            ref = a.double() @ b.double().T
            out = family.gemm_nt(a, b, config=cfg, ctas=ctas)
            assert calc_diff(out, ref) < 1e-2, cfg.tile_name
            grid = cfg.grid(M, N, ctas)
            plan = reorder.tile_reorder(grid, (1,) * grid.num_waves)
            comm = torch.empty(M * N, dtype=torch.bfloat16, device="cuda")
            counters = torch.zeros(plan.num_groups, dtype=torch.int32, device="cuda")
            ro = torch.from_numpy(plan.row_offset).cuda()
            family.gemm_nt_signal(a, b, comm, ro, torch.from_numpy(plan.tile_group).cuda(), counters,
                                  config=cfg, ctas=ctas)
            family.gemm_nt_scatter(a, b, torch.empty_like(comm), ro, config=cfg, ctas=ctas)
            rows = torch.empty_like(comm)  # signal_rows: C row-major into the buffer, then the signal
            row_counters = torch.zeros_like(counters)
            family.gemm_nt_signal(a, b, rows, None, torch.from_numpy(plan.tile_group).cuda(), row_counters,
                                  config=cfg, ctas=ctas)
            placed = torch.empty_like(comm)  # signal_tiles: the same layout from the tiles' places
            placed_counters = torch.zeros_like(counters)
            family.gemm_nt_signal(a, b, placed, None, torch.from_numpy(plan.tile_group).cuda(), placed_counters,
                                  config=cfg, ctas=ctas, tile_place=torch.from_numpy(plan.tile_place).cuda())
            _, probe = family.gemm_nt_probe(a, b, config=cfg, ctas=ctas)
            ops = postops.PostOps(bias=True, activation="silu", residual=True, rmsnorm=True, eps=1e-5)
            bias = torch.randn(N, device="cuda").bfloat16()
            res = torch.randn(M, N, device="cuda").bfloat16()
            w = torch.randn(N, device="cuda").bfloat16()
            y = postops.post_reorder(comm, torch.from_numpy(plan.post_table).cuda(), (M, N), cfg.BN, ops,
                                     bias=bias, residual=res, weight=w)
            x = torch.nn.functional.silu(out.double() + bias.double()) + res.double()
            want = x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-5) * w.double()
            assert calc_diff(y, want) < 2e-2, (cfg.tile_name, calc_diff(y, want))
            torch.cuda.synchronize()
            assert counters.cpu().tolist() == plan.group_tiles.tolist()
            assert row_counters.cpu().tolist() == plan.group_tiles.tolist() and torch.equal(rows.view(M, N), out)
            assert placed_counters.cpu().tolist() == plan.group_tiles.tolist() and torch.equal(placed, comm)
            assert (probe[:, 1] >= probe[:, 0]).all()


def main() -> None:
    exercise(gemm.PORTABLE, [gemm.CONFIGS[c] for c in ("64x64x32", "128x128x32", "256x128x64")],
             ((130, 200, 72), (257, 136, 40)))
    # Wait kernel: satisfied, then one that times out into the error word.
    counter = torch.zeros(2, dtype=torch.int32, device="cuda")
    err = torch.zeros(1, dtype=torch.int32, device="cuda")
    counting.bump_counter(counter, 0, 3)
    counting.wait_counter(counter, 0, 3, err, timeout_ns=50_000_000)
    counting.wait_counter(counter, 1, 1, err, timeout_ns=2_000_000)
    assert counting.read_wait_error(err) == 1
    torch.cuda.synchronize()
    print("sanitize: ok")


def sm90(stream_k_only: bool = False) -> None:
    """The sm_90a GEMM (TMA + wgmma) in every epilogue, tails in M, N and K, few CTAs; then its
    stream-K tails (only those with ``stream_k_only``)."""
    from dataclasses import replace

    from fo_lib.gemm import sm90 as gemm_sm90
    from fo_lib.gemm.sm90 import stream_k_tail

    # Of the widths between 128 and 256, one whose C rows are padded (176), one swizzled (192) and one
    # of an odd count of 8-column blocks (168: the last stored by stmatrix x2): the others differ from
    # them only in constants; every direct-C config (ping-pong consumers that store C themselves).
    configs = [c for n, c in gemm_sm90.CONFIGS.items() if c.BN in (128, 168, 176, 192, 256) or c.direct_c]
    if not stream_k_only:
        exercise(gemm_sm90.SM90, configs, ((130, 200, 72), (257, 136, 40), (300, 520, 136)))
    # The stream-K tail on 3 CTAs, partial sums through the workspace: runs of k-blocks (200 x 300 x
    # 72, 140 x 520 x 200) and the split tail (130 x 520 x 520: the last of ten 128 x 128 tiles in 2
    # parts; 130 x 1800 x 1024: the last of 16 128 x 256 tiles in 3). M = 130 and 140 leave at most 64
    # rows in the last tile row: cooperative configs idle a warpgroup there.
    sk = [replace(c, stream_k=True) for c in configs if c.cluster == 1]
    shapes = ((200, 300, 72), (140, 520, 200), (130, 520, 520), (130, 1800, 1024))
    # Each plan of those short last rows: as the planner weighs their tiles (stream_k_tail.IDLE_WARPGROUP_TILE_COST),
    # and in runs of unequal length, planned as if such a tile cost 0.6 of a whole one.
    for cost in (stream_k_tail.IDLE_WARPGROUP_TILE_COST, 0.6):
        with gemm_sm90.idle_warpgroup_tile_cost(cost):
            plans = [gemm_sm90.stream_k_schedule(c, M, N, K, 3) for c in sk for M, N, K in shapes]
            splits = {split for _, split, _ in plans}
            assert {1, 2, 3} <= splits, splits
            assert any(bounds is not None for *_, bounds in plans) == (cost < 1), cost
            exercise(gemm_sm90.SM90, sk, shapes)
    print("sanitize: ok")


if __name__ == "__main__":
    if "--stream-k" in sys.argv[1:] and "--sm90" not in sys.argv[1:]:
        sys.exit("sanitize_kernels: --stream-k selects the sm_90a GEMM's stream-K tails: give it with --sm90")
    sm90("--stream-k" in sys.argv[1:]) if "--sm90" in sys.argv[1:] else main()
