"""Property tests of the mapping tables and the NumPy reference reorders."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from fo_lib import partition as P
from fo_lib import reorder as R
from fo_lib.tiling import TileGrid

BM_CHOICES = [16, 32, 64, 128]
BN_CHOICES = [16, 32, 64, 128]


@st.composite
def grids(draw, max_tiles=80):
    BM = draw(st.sampled_from(BM_CHOICES))
    BN = draw(st.sampled_from(BN_CHOICES))
    M = draw(st.integers(1, 8 * BM))
    N = draw(st.integers(1, 8 * BN))
    sms = draw(st.integers(1, 20))
    g = TileGrid(M, N, BM=BM, BN=BN, sm_count=sms, order=draw(st.sampled_from(["row", "col"])),
                 swizzle=draw(st.integers(1, 4)))
    return g


@st.composite
def grid_and_partition(draw):
    g = draw(grids())
    T = g.num_waves
    cuts = draw(st.lists(st.booleans(), min_size=T - 1, max_size=T - 1))
    return g, P.from_cuts(cuts)


def _check_groups_contiguous(plan, table, N, BN, slices):
    idx = R.element_index(table, N, BN)
    tile = (np.arange(plan.grid.M)[:, None] // plan.grid.BM) * plan.grid.tiles_n + np.arange(N)[None, :] // BN
    group = plan.tile_group[tile]
    for gi, (start, stop) in enumerate(slices):
        mine = idx[group == gi]
        assert mine.size == 0 or (mine.min() >= start and mine.max() < stop)


@given(grid_and_partition(), st.integers(0, 2**31 - 1))
def test_tile_round_trip_and_bijection(gp, seed):
    g, part = gp
    plan = R.tile_reorder(g, part)
    idx = R.element_index(plan.row_offset, g.N, g.BN)
    # Every element written exactly once, the buffer covered exactly.
    assert np.array_equal(np.sort(idx.ravel()), np.arange(g.M * g.N))
    C = np.random.default_rng(seed).standard_normal((g.M, g.N))
    buf = R.pre_reorder(C, plan.row_offset, plan.buffer_elements, g.BN)
    assert not np.isnan(buf).any()
    assert np.array_equal(R.post_reorder(buf, plan.post_table, g.N, g.BN), C)
    # Group slices tile the buffer in order and each group's elements lie inside its slice.
    assert plan.group_slices[0, 0] == 0 and plan.group_slices[-1, 1] == g.M * g.N
    assert np.array_equal(plan.group_slices[1:, 0], plan.group_slices[:-1, 1])
    _check_groups_contiguous(plan, plan.row_offset, g.N, g.BN, plan.group_slices)
    assert plan.group_tiles.sum() == g.num_tiles
    assert plan.group_tiles.tolist() == np.bincount(plan.tile_group, minlength=len(part)).tolist()
    # Groups follow the waves: group sizes in tiles match the partition's waves.
    sizes = [int(g.tiles_per_wave[a:b].sum()) for a, b in zip(P.boundaries(part)[:-1], P.boundaries(part)[1:])]
    assert plan.group_tiles.tolist() == sizes


@given(grid_and_partition())
def test_rows_layout_groups_are_row_ranges_no_later_than_their_waves(gp):
    g, part = gp
    if g.order != "row":
        with pytest.raises(R.ReorderError, match="row raster"):
            R.row_reorder(g, part)
        return
    plan = R.row_reorder(g, part)
    G = plan.num_groups
    assert 1 <= G <= len(part) and plan.group_tiles.sum() == g.num_tiles
    assert plan.group_tiles.tolist() == np.bincount(plan.tile_group, minlength=G).tolist()
    # The identity table: the buffer is C itself.
    C = np.random.default_rng(0).standard_normal((g.M, g.N))
    assert np.array_equal(R.pre_reorder(C, plan.row_offset, plan.buffer_elements, g.BN).reshape(g.M, g.N), C)
    # Group g is exactly the tiles of output rows row_cuts[g]:row_cuts[g+1] (whole rows, in order) ...
    assert plan.row_cuts[0] == 0 and plan.row_cuts[-1] == g.M and (np.diff(plan.row_cuts) > 0).all()
    tile_row_group = plan.tile_group.reshape(g.tiles_m, g.tiles_n)
    assert (tile_row_group == tile_row_group[:, :1]).all()
    row_group = np.repeat(tile_row_group[:, 0], g.BM)[:g.M]
    assert np.array_equal(row_group, np.searchsorted(plan.row_cuts, np.arange(g.M), side="right") - 1)
    assert np.array_equal(plan.group_slices, np.stack([plan.row_cuts[:-1], plan.row_cuts[1:]], 1) * g.N)
    _check_groups_contiguous(plan, plan.row_offset, g.N, g.BN, plan.group_slices)
    # ... and its cut is a wave cut moved down to a band start: every group ends no later than the
    # wave cut it came from, and by less than one band of tiles.
    band = R.band_tiles(g)
    ends = np.cumsum(plan.group_tiles)[:-1]
    wave_cuts = P.boundaries(part)[1:-1] * g.ctas
    assert set(ends.tolist()) == set(((wave_cuts // band) * band).tolist()) - {0}
    for e in ends:
        c = wave_cuts[wave_cuts >= e].min()
        assert c - band < e <= c and e % band == 0


@given(grid_and_partition(), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_gather_reorder_sums_every_ranks_copy(gp, W, seed):
    """AllReduce as an in-place AllGather per group + a summing post-reorder, simulated for W ranks."""
    from fo_lib.postops import gather_reference

    g, part = gp
    base = R.tile_reorder(g, part)
    plans = [R.gather_reorder(g, part, W, k) for k in range(W)]
    p0 = plans[0]
    assert p0.buffer_elements == W * g.M * g.N
    assert np.array_equal(p0.group_slices, W * base.group_slices)
    assert np.array_equal(p0.tile_group, base.tile_group) and np.array_equal(p0.group_tiles, base.group_tiles)
    rng = np.random.default_rng(seed)
    Cs = [rng.standard_normal((g.M, g.N)) for _ in range(W)]
    buf = np.full(p0.buffer_elements, np.nan)
    for k, plan in enumerate(plans):
        # Rank k's copy of each group is its AllGather send span, inside the group's receive span.
        assert np.array_equal(plan.post_table, p0.post_table) and np.array_equal(plan.peer_stride, p0.peer_stride)
        span = plan.own_slices[:, 1] - plan.own_slices[:, 0]
        assert np.array_equal(span, base.group_slices[:, 1] - base.group_slices[:, 0])
        assert np.array_equal(plan.own_slices[:, 0], W * base.group_slices[:, 0] + k * span)
        _check_groups_contiguous(plan, plan.row_offset, g.N, g.BN, plan.own_slices)
        idx = R.element_index(plan.row_offset, g.N, g.BN)
        assert np.isnan(buf[idx]).all()  # the ranks' copies never overlap
        buf[idx] = Cs[k]  # the AllGather: every rank ends with every copy
    assert not np.isnan(buf).any()
    np.testing.assert_allclose(gather_reference(buf, p0.post_table, (g.M, g.N), g.BN, W,
                                                p0.peer_stride if W > 1 else None), sum(Cs),
                               rtol=1e-12, atol=1e-12)
    if p0.tile_place is not None:  # the GEMM's per-tile places describe the same store table
        assert p0.tile_place.shape == (g.num_tiles, 4)


def test_gather_reorder_errors():
    g = TileGrid(100, 100, BM=16, BN=16, sm_count=4)
    with pytest.raises(R.ReorderError, match="rank 2 outside"):
        R.gather_reorder(g, (g.num_waves,), 2, 2)
    with pytest.raises(R.ReorderError, match="world size"):
        R.gather_reorder(g, (g.num_waves,), 0, 0)


@st.composite
def rs_case(draw):
    g, part = draw(grid_and_partition())
    divisors = [w for w in (1, 2, 4, 8, 16) if g.BM % w == 0]
    return g, part, draw(st.sampled_from(divisors))


@given(rs_case(), st.integers(0, 2**31 - 1))
def test_subtile_reduce_scatter_semantics(case, seed):
    g, part, W = case
    plan = R.subtile_reorder(g, part, W)
    idx = R.element_index(plan.row_offset, g.N, g.BN)
    assert len(np.unique(idx)) == idx.size and idx.max() < plan.buffer_elements  # injective
    _check_groups_contiguous(plan, plan.row_offset, g.N, g.BN, plan.group_slices)
    # Slice k of every group holds exactly rank k's rows.
    rows = np.broadcast_to(np.arange(g.M)[:, None], idx.shape)
    for gi, (start, _) in enumerate(plan.group_slices):
        c = plan.chunk_elements[gi]
        for k in range(W):
            inside = (idx >= start + k * c) & (idx < start + (k + 1) * c)
            assert set(np.unique(rows[inside])) <= set(plan.owned_rows(k).tolist())
    owned = np.concatenate([plan.owned_rows(k) for k in range(W)])
    assert np.array_equal(np.sort(owned), np.arange(g.M))
    # Simulate W ranks: pre-reorder, per-group ReduceScatter, post gather, AllGather + restore.
    rng = np.random.default_rng(seed)
    Cs = [rng.standard_normal((g.M, g.N)) for _ in range(W)]
    total = sum(R.pre_reorder(c, plan.row_offset, plan.buffer_elements, g.BN, fill=0.0) for c in Cs)
    ref = sum(Cs)
    locals_ = []
    for k in range(W):
        recv = np.concatenate([total[s + k * c: s + (k + 1) * c]
                               for (s, _), c in zip(plan.group_slices, plan.chunk_elements)])
        assert recv.size == plan.recv_elements
        local = R.post_reorder(recv, plan.recv_table(k), g.N, g.BN)
        np.testing.assert_allclose(local, ref[plan.owned_rows(k)], rtol=1e-12, atol=1e-12)
        padded = np.zeros((plan.max_rows, g.N))
        padded[:len(local)] = local
        locals_.append(padded)
    gathered = np.concatenate(locals_).ravel()
    np.testing.assert_allclose(R.post_reorder(gathered, plan.allgather_table(), g.N, g.BN), ref,
                               rtol=1e-12, atol=1e-12)


def test_subtile_contiguous_ownership_helper():
    g = TileGrid(512, 96, BM=64, BN=32, sm_count=5)
    plan = R.subtile_reorder(g, (g.num_waves,), 4)
    perm = plan.contiguous_row_permutation()
    C = np.random.default_rng(0).standard_normal((g.M, g.N))
    # Output rows of a GEMM on A[perm] are C[perm]; rank k must then hold C[k*R:(k+1)*R].
    R_ = g.M // 4
    for k in range(4):
        assert np.array_equal(C[perm][plan.owned_rows(k)], C[k * R_:(k + 1) * R_])
    tail = R.subtile_reorder(TileGrid(100, 32, BM=64, BN=32, sm_count=3), (1,), 4)
    with pytest.raises(R.ReorderError, match="same number of rows"):
        tail.contiguous_row_permutation()


def _routing(rng, W, M, skew):
    probs = rng.dirichlet(np.full(W, skew))
    if W > 1 and rng.random() < 0.3:  # an empty destination
        probs[rng.integers(W)] = 0
        probs /= probs.sum()
    dest = [rng.choice(W, size=M, p=probs) for _ in range(W)]
    counters = np.zeros(W, dtype=np.int64)
    idx = []
    for s in range(W):
        x = np.empty(M, dtype=np.int64)
        for i in range(M):
            x[i] = counters[dest[s][i]]
            counters[dest[s][i]] += 1
        idx.append(x)
    # Shuffle each receiver's slots so the order is not the trivial one.
    for q in range(W):
        perm = rng.permutation(counters[q])
        for s in range(W):
            m = dest[s] == q
            idx[s][m] = perm[idx[s][m]]
    return dest, idx


@given(grid_and_partition(), st.integers(1, 5), st.floats(0.1, 5.0), st.integers(0, 2**31 - 1))
def test_subtoken_all_to_all(gp, W, skew, seed):
    g, part = gp
    rng = np.random.default_rng(seed)
    dest, idx = _routing(rng, W, g.M, skew)
    plans = [R.subtoken_reorder(g, part, dest, idx, r) for r in range(W)]
    Cs = [rng.standard_normal((g.M, g.N)) for _ in range(W)]
    sends = []
    for r, plan in enumerate(plans):
        e = R.element_index(plan.row_offset, g.N, g.BN)
        assert np.array_equal(np.sort(e.ravel()), np.arange(g.M * g.N))
        # Per-destination counts: elements of group gi going to d.
        tile = (np.arange(g.M)[:, None] // g.BM) * g.tiles_n + np.arange(g.N)[None, :] // g.BN
        grp = plan.tile_group[tile]
        d_of = np.broadcast_to(dest[r][:, None], grp.shape)
        for gi in range(len(part)):
            for d in range(W):
                assert plan.send_counts[gi, d] == np.count_nonzero((grp == gi) & (d_of == d))
                lo = plan.send_offsets[gi, d]
                sel = e[(grp == gi) & (d_of == d)]
                assert sel.size == 0 or (sel.min() == lo and sel.max() == lo + sel.size - 1)
        sends.append(R.pre_reorder(Cs[r], plan.row_offset, plan.buffer_elements, g.BN))
    for q, plan in enumerate(plans):
        recv = np.full(plan.recv_elements, np.nan)
        for gi in range(len(part)):
            for s in range(W):
                n = plan.recv_counts[gi, s]
                assert n == plans[s].send_counts[gi, q]
                o, so = plan.recv_offsets[gi, s], plans[s].send_offsets[gi, q]
                recv[o:o + n] = sends[s][so:so + n]
        out = R.post_reorder(recv, plan.recv_table, g.N, g.BN)
        ref = np.full_like(out, np.nan)
        for s in range(W):
            m = dest[s] == q
            ref[idx[s][m]] = Cs[s][m]
        assert np.array_equal(out, ref)


def test_reorder_errors():
    g = TileGrid(256, 64, BM=64, BN=32, sm_count=3)
    with pytest.raises(R.ReorderError, match="divisible by the world size 3"):
        R.subtile_reorder(g, (g.num_waves,), 3)
    with pytest.raises(ValueError, match="covers"):
        R.tile_reorder(g, (1,) * (g.num_waves + 1))
    dest = [np.zeros(256, dtype=np.int64)] * 2
    with pytest.raises(R.ReorderError, match="permutation"):
        R.subtoken_reorder(g, (g.num_waves,), dest, [np.zeros(256, dtype=np.int64)] * 2, 0)
    with pytest.raises(R.ReorderError, match=r"shape \(256,\)"):
        R.subtoken_reorder(g, (g.num_waves,), [np.zeros(5, dtype=np.int64)] * 2,
                           [np.zeros(5, dtype=np.int64)] * 2, 0)
    with pytest.raises(R.ReorderError, match="lie in"):
        R.subtoken_reorder(g, (g.num_waves,), [np.full(256, 7)] * 2, [np.arange(256)] * 2, 0)


def _placed_table(grid, places):
    """The row table the GEMM's signal_tiles epilogue stores through, from the tiles' places: the
    kernels' arithmetic (gemm_mma.cuh, gemm_sm90.cuh), with each tile's row count and width taken
    from the grid here."""
    i = np.arange(grid.M)[:, None]
    tn = np.arange(grid.tiles_n)[None, :]
    tile = (i // grid.BM) * grid.tiles_n + tn
    r = i % grid.BM
    cols = np.minimum(grid.BN, grid.N - tn * grid.BN)
    base, stride, shift = (places[tile, k] for k in range(3))
    return base + (r >> shift) * stride + (r & ((1 << shift) - 1)) * cols


@given(rs_case())
def test_tile_places_reproduce_the_row_tables(case):
    g, part, W = case
    tiles = R.tile_reorder(g, part)
    assert tiles.tile_place.shape == (g.num_tiles, 4) and tiles.tile_place.dtype == np.int64
    assert np.array_equal(_placed_table(g, tiles.tile_place), tiles.row_offset)
    sub = R.subtile_reorder(g, part, W)
    assert np.array_equal(_placed_table(g, sub.tile_place), sub.row_offset)  # BM / W: a power of two here


def test_tile_places_only_for_tile_blocks():
    g = TileGrid(300, 200, BM=96, BN=64, sm_count=4)
    assert R.subtile_reorder(g, (g.num_waves,), 2).tile_place is None  # 48-row subtiles: no shift
    rows = R.row_reorder(TileGrid(300, 200, BM=64, BN=64, sm_count=4, order="row", swizzle=1), (2, 3))
    assert rows.tile_place is None  # C row-major: the rows layout's own epilogue
    bad = R.tile_reorder(TileGrid(256, 256, BM=64, BN=64, sm_count=4), (4,))
    with pytest.raises(R.ReorderError, match="do not reproduce"):
        R._tile_places(bad.grid, bad.row_offset[::-1].copy(), 64, 0)
