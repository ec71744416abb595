"""Helpers shared by the GEMM GPU tests (portable and sm90): inputs, float64 reference, a poisoned
output with a guard frame, random signal tables, and the shape list."""
import numpy as np
import torch

from fo_lib.testing import random_tile_layout
from fo_lib.tiling import TileGrid

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
TOL = {"bf16": 1e-2, "f16": 2e-3}

SHAPES = [  # (M, N, K): tails in M and N, tiny M/N, small K, and a few big ones
    (1, 8, 8), (1, 4096, 64), (1, 200, 24), (2, 8, 16), (7, 9, 8), (16, 16, 16), (31, 33, 24),
    (64, 64, 32), (65, 63, 40), (100, 8, 256), (8, 1000, 128), (127, 255, 56), (128, 256, 32),
    (129, 257, 72), (255, 129, 96), (256, 128, 64), (257, 384, 200), (300, 500, 1000),
    (384, 640, 8), (512, 512, 512), (513, 1025, 136), (1000, 1000, 1000), (1024, 4096, 1024),
    (2048, 2048, 2048), (1537, 2049, 520), (4096, 4096, 4096), (4095, 4097, 264), (24, 8200, 512),
    (8200, 24, 512), (3000, 130, 4104), (130, 3000, 16), (2000, 6000, 344),
]


def inputs(M, N, K, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", generator=g).to(DTYPES[dtype])
    b = torch.randn(N, K, device="cuda", generator=g).to(DTYPES[dtype])
    return a, b


def ref(a, b):
    return a.double() @ b.double().T


def guarded_out(M, N, dtype):
    """A NaN-filled buffer with a guard frame around an M x N view (row stride > N, 16-byte aligned)."""
    ld = -(-(N + 16) // 8) * 8
    buf = torch.full((M + 2, ld), float("nan"), dtype=DTYPES[dtype], device="cuda")
    out = buf[1:M + 1, 8:8 + N]
    mask = torch.zeros_like(buf, dtype=torch.bool)
    mask[1:M + 1, 8:8 + N] = True
    return buf, out, mask


def signal_tables(M, N, cfg, groups, seed):
    """Tiles packed back to back (rows of ``cols`` elements) in a random tile order: a bijection
    onto [0, M*N) whose rows are often not 16-byte aligned (exercises the scalar store path)."""
    rng = np.random.default_rng(seed)
    grid = TileGrid(M, N, cfg.BM, cfg.BN)
    tm_, tn_ = grid.tiles_m, grid.tiles_n
    row_offset, size = random_tile_layout(M, N, cfg.BM, cfg.BN, rng)
    assert size == M * N
    tile_group = rng.integers(0, groups, size=tm_ * tn_).astype(np.int32)
    return row_offset, tile_group, grid


def gather_index(row_offset, M, N, BN):
    j = np.arange(N)
    return row_offset[:, j // BN] + (j % BN)[None, :]


def check_signal_rejects_bad_tables(family, cfg):
    """Every bad table or buffer of ``family.gemm_nt_signal`` is refused with a clear GemmError, after
    one valid call (both GEMM families share the validation: see fo_lib.gemm.GemmFamily)."""
    import pytest

    from fo_lib.gemm import GemmError

    a, b = inputs(256, 256, 64, "bf16", seed=7)
    comm = torch.empty(256 * 256, dtype=torch.bfloat16, device="cuda")
    ro = torch.zeros(256, -(-256 // cfg.BN), dtype=torch.int64, device="cuda")
    tg = torch.zeros(-(-256 // cfg.BM) * ro.shape[1], dtype=torch.int32, device="cuda")
    cnt = torch.zeros(1, dtype=torch.int32, device="cuda")
    family.gemm_nt_signal(a, b, comm, ro, tg, cnt, config=cfg)  # valid (all rows overlap, fine)
    with pytest.raises(GemmError, match="row_offset"):
        family.gemm_nt_signal(a, b, comm, ro.int(), tg, cnt, config=cfg)
    with pytest.raises(GemmError, match="row_offset"):
        family.gemm_nt_signal(a, b, comm, ro[:, :1].contiguous(), tg, cnt, config=cfg)
    with pytest.raises(GemmError, match="tile_group"):
        family.gemm_nt_signal(a, b, comm, ro, tg[:3], cnt, config=cfg)
    with pytest.raises(GemmError, match="group_counter"):
        family.gemm_nt_signal(a, b, comm, ro, tg, cnt.cpu(), config=cfg)
    with pytest.raises(GemmError, match="comm_buf"):
        family.gemm_nt_signal(a, b, comm[:100], ro, tg, cnt, config=cfg)
    with pytest.raises(GemmError, match="explicit config"):
        family.gemm_nt_signal(a, b, comm, ro, tg, cnt, config=None)
    with pytest.raises(GemmError, match="comm_buf"):  # the rows store (no table) checks the buffer too
        family.gemm_nt_signal(a, b, comm[:100], None, tg, cnt, config=cfg)
    with pytest.raises(GemmError, match="row_offset is required"):
        family.gemm_nt_scatter(a, b, comm, None, config=cfg)
    place = torch.zeros(tg.numel(), 4, dtype=torch.int64, device="cuda")
    family.gemm_nt_signal(a, b, comm, None, tg, cnt, config=cfg, tile_place=place)  # valid (all tiles at 0)
    with pytest.raises(GemmError, match="not both"):
        family.gemm_nt_signal(a, b, comm, ro, tg, cnt, config=cfg, tile_place=place)
    with pytest.raises(GemmError, match="tile_place"):
        family.gemm_nt_signal(a, b, comm, None, tg, cnt, config=cfg, tile_place=place[:, :2].contiguous())
    with pytest.raises(GemmError, match="tile_place"):
        family.gemm_nt_signal(a, b, comm, None, tg, cnt, config=cfg, tile_place=place.int())
    with pytest.raises(GemmError, match="16-byte"):
        family.gemm_nt_signal(a, b, comm, None, tg, cnt, config=cfg,
                              tile_place=torch.zeros(tg.numel() * 4 + 1, dtype=torch.int64, device="cuda")[1:].view(-1, 4))
