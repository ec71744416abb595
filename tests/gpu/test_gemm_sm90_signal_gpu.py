"""The Hopper GEMM's signal epilogue: row tables (random and fo_lib.reorder's tile / subtile /
subtoken layouts), exact counters over back-to-back epochs, and a counter-gated reader on a second
stream."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import counting, reorder  # noqa: E402
from fo_lib.gemm import sm90 as gemm_sm90  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402
from gemm_helpers import (DTYPES, TOL, check_signal_rejects_bad_tables, gather_index, inputs, ref,  # noqa: E402
                          signal_tables)
from sm90_cases import CONFIG_NAMES, NEEDS_SM90  # noqa: E402

pytestmark = [pytest.mark.gpu, NEEDS_SM90]

SECOND = 1_000_000_000


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("cname", CONFIG_NAMES)
@pytest.mark.parametrize("M,N,K,groups", [(1, 8, 8, 1), (100, 300, 64, 3), (1000, 2000, 264, 5),
                                          (2048, 4096, 512, 8), (257, 129, 40, 2), (77, 1000, 16, 4)])
@pytest.mark.parametrize("epilogue", ["signal", "scatter", "signal_rows"])
def test_gemm_signal(M, N, K, groups, cname, dtype, epilogue):
    cfg = gemm_sm90.CONFIGS[cname].with_raster("col", 2)
    a, b = inputs(M, N, K, dtype, seed=M + N + K)
    row_offset, tile_group, grid = signal_tables(M, N, cfg, groups, seed=M * N)
    guard = 64
    comm = torch.full((M * N + guard,), float("nan"), dtype=DTYPES[dtype], device="cuda")
    ro = torch.from_numpy(row_offset).cuda()
    tg = torch.from_numpy(tile_group).cuda()
    counters = torch.zeros(groups, dtype=torch.int32, device="cuda")
    if epilogue == "signal_rows":  # C row-major into comm, no table: the rows layout's store
        row_offset = np.arange(M, dtype=np.int64)[:, None] * N + np.arange(grid.tiles_n)[None, :] * cfg.BN
        gemm_sm90.gemm_nt_signal(a, b, comm, None, tg, counters, config=cfg)
    elif epilogue == "signal":
        gemm_sm90.gemm_nt_signal(a, b, comm, ro, tg, counters, config=cfg)
    else:
        gemm_sm90.gemm_nt_scatter(a, b, comm, ro, config=cfg)
    plain = gemm_sm90.gemm_nt(a, b, config=cfg)
    torch.cuda.synchronize()
    assert not torch.isnan(comm[:M * N]).any(), "comm_buf elements left unwritten"
    assert torch.isnan(comm[M * N:]).all(), "comm_buf written past the table's range"
    got = comm[torch.from_numpy(gather_index(row_offset, M, N, cfg.BN)).cuda()]
    assert torch.equal(got, plain), "signal epilogue stored different values / places than plain"
    assert calc_diff(got, ref(a, b)) < TOL[dtype]
    expect = np.bincount(tile_group, minlength=groups) if epilogue != "scatter" else np.zeros(groups)
    assert counters.cpu().numpy().tolist() == expect.tolist()


def _plan(mode, grid, part, M, rng):
    if mode == "tile":
        return reorder.tile_reorder(grid, part)
    if mode.startswith("subtile"):
        return reorder.subtile_reorder(grid, part, 8 if mode == "subtile8" else 4)
    W = 3
    dest = [rng.integers(0, W, M) for _ in range(W)]
    idx = [np.zeros(M, dtype=np.int64) for _ in range(W)]
    cnt = np.zeros(W, dtype=np.int64)
    for s_ in range(W):
        for i in range(M):
            idx[s_][i] = cnt[dest[s_][i]]
            cnt[dest[s_][i]] += 1
    return reorder.subtoken_reorder(grid, part, dest, idx, 1)


@pytest.mark.parametrize("cname", CONFIG_NAMES)
@pytest.mark.parametrize("mode,store", [("tile", "table"), ("tile", "places"), ("subtile", "table"),
                                        ("subtile", "places"), ("subtile8", "places"), ("subtoken", "table")])
@pytest.mark.parametrize("M,N,K", [(1000, 1100, 64), (4096, 2048, 128), (300, 4096, 32), (777, 1000, 200)])
def test_gemm_signal_with_reorder_tables(mode, store, M, N, K, cname):
    """The kernel stores exactly where fo_lib.reorder's tables say (the NumPy pre-reorder), through
    the row table or (tile blocks) through the tiles' places."""
    cfg = gemm_sm90.CONFIGS[cname].with_raster("row", 4)
    ctas = 40
    grid = cfg.grid(M, N, ctas)
    T = grid.num_waves
    part = tuple([1] * min(T, 3) + ([T - 3] if T > 3 else []))
    plan = _plan(mode, grid, part, M, np.random.default_rng(M + N))
    a, b = inputs(M, N, K, "bf16", seed=M)
    n = plan.buffer_elements
    comm = torch.full((n,), float("nan"), dtype=torch.bfloat16, device="cuda")
    counters = torch.zeros(len(part), dtype=torch.int32, device="cuda")
    tables = (dict(row_offset=torch.from_numpy(plan.row_offset).cuda()) if store == "table" else
              dict(row_offset=None, tile_place=torch.from_numpy(plan.tile_place).cuda()))
    gemm_sm90.gemm_nt_signal(a, b, comm, tile_group=torch.from_numpy(plan.tile_group).cuda(),
                             group_counter=counters, config=cfg, ctas=ctas, **tables)
    plain = gemm_sm90.gemm_nt(a, b, config=cfg).float().cpu().numpy()
    expect = reorder.pre_reorder(plain, plan.row_offset, n, cfg.BN)
    got = comm.float().cpu().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expect))
    np.testing.assert_array_equal(got[~np.isnan(got)], expect[~np.isnan(expect)])
    assert counters.cpu().numpy().tolist() == plan.group_tiles.tolist()


def test_gemm_signal_counters_accumulate():
    """120 back-to-back calls: every counter = calls x its group's tiles (epochs, never reset)."""
    cfg = gemm_sm90.CONFIGS["128x128x64"].with_raster("row", 2)
    M, N, K, groups, calls = 1000, 1500, 128, 6, 120
    a, b = inputs(M, N, K, "bf16", seed=5)
    row_offset, tile_group, grid = signal_tables(M, N, cfg, groups, seed=6)
    comm = torch.empty(M * N, dtype=torch.bfloat16, device="cuda")
    ro, tg = torch.from_numpy(row_offset).cuda(), torch.from_numpy(tile_group).cuda()
    counters = torch.zeros(groups, dtype=torch.uint32, device="cuda")
    for _ in range(calls):
        gemm_sm90.gemm_nt_signal(a, b, comm, ro, tg, counters, config=cfg, ctas=50)
    torch.cuda.synchronize()
    expect = calls * np.bincount(tile_group, minlength=groups)
    assert counters.cpu().to(torch.int64).numpy().tolist() == expect.tolist()


@pytest.mark.parametrize("cname", CONFIG_NAMES)
def test_gemm_signal_gates_a_reader_on_another_stream(cname):
    """The protocol end to end: a second stream waits for each group's epoch target, then copies that
    group's slice while the GEMM is still running later groups. Calls alternate between two input
    sets (so a stale slice is caught) and two buffers; every copied slice must hold its call's data."""
    cfg = gemm_sm90.CONFIGS[cname].with_raster("row", 2)
    M, N, K, calls = 2048, 4096, 1024, 8
    ctas = 33 + (cfg.cluster == 2)  # clusters come in pairs
    grid = cfg.grid(M, N, ctas)
    plan = reorder.tile_reorder(grid, (1,) * grid.num_waves)
    sets = [inputs(M, N, K, "bf16", seed=40 + i) for i in range(2)]
    ro = torch.from_numpy(plan.row_offset).cuda()
    tg = torch.from_numpy(plan.tile_group).cuda()
    n = plan.buffer_elements
    expect = [reorder.pre_reorder(gemm_sm90.gemm_nt(a, b, config=cfg).float().cpu().numpy(), plan.row_offset, n,
                                  cfg.BN) for a, b in sets]
    bufs = [torch.empty(n, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    snaps = [torch.full((n,), float("nan"), dtype=torch.bfloat16, device="cuda") for _ in range(calls)]
    counters = torch.zeros(plan.num_groups, dtype=torch.int32, device="cuda")
    err = torch.zeros(1, dtype=torch.int32, device="cuda")
    # Warm-up: load the GEMM and wait kernels before any wait spins (lazy module loading would deadlock).
    warm = torch.zeros(plan.num_groups, dtype=torch.int32, device="cuda")
    gemm_sm90.gemm_nt_signal(*sets[0], bufs[0], ro, tg, warm, config=cfg, ctas=ctas)
    counting.wait_counter(warm, 0, 1, err, SECOND)
    torch.cuda.synchronize()
    # Two non-blocking side streams (never the legacy default stream, which would serialize them).
    compute, comm = torch.cuda.Stream(), torch.cuda.Stream(priority=-1)
    targets = counting.EpochTargets(plan.group_tiles)
    done = []
    for e in range(calls):
        if e >= 2:
            compute.wait_event(done[e - 2])  # buffer e % 2 was read by call e - 2's copies
        a, b = sets[e % 2]
        gemm_sm90.gemm_nt_signal(a, b, bufs[e % 2], ro, tg, counters, config=cfg, ctas=ctas, stream=compute)
        with torch.cuda.stream(comm):
            for g, target in enumerate(targets.next()):
                counting.wait_counter(counters, g, target, err, 20 * SECOND, stream=comm)
                s0, s1 = (int(v) for v in plan.group_slices[g])
                snaps[e][s0:s1].copy_(bufs[e % 2][s0:s1])
            ev = torch.cuda.Event()
            ev.record(comm)
            done.append(ev)
    counting.check_wait_error(err, comm)
    torch.cuda.synchronize()
    for e in range(calls):
        got = snaps[e].float().cpu().numpy()
        np.testing.assert_array_equal(got, expect[e % 2], err_msg=f"call {e}")
    assert counters.cpu().numpy().tolist() == (calls * plan.group_tiles).tolist()


def test_gemm_signal_rejects_bad_tables():
    check_signal_rejects_bad_tables(gemm_sm90.SM90, gemm_sm90.CONFIGS["128x128x64"])
