"""The Hopper GEMM's consumer protocol (operand ring, C staging, stream-K flags, clusters, ping-pong
order barriers) in a random-interleaving model with mbarrier parity semantics: no violation with the
kernel's barriers; without the C-staging order (epi[c]) the model finds ping-pong's race, so it can fail."""
import io
from contextlib import redirect_stdout

from script_loader import load_script


def _sim():
    return load_script("scripts/tooling/sm90_protocol_sim.py")


def _failing(argv) -> int:
    sim, out = _sim(), io.StringIO()
    sim.sys.argv = ["sim", *argv]
    with redirect_stdout(out):
        sim.main()
    return int(out.getvalue().strip().splitlines()[-1].split()[-1])


def test_the_kernels_protocol_has_no_violation():
    assert _failing(["2000", "fix"]) == 0


def test_without_the_staging_order_ping_pong_races():
    assert _failing(["500"]) > 0


def test_cooperative_mmas_in_flight_freeing_a_stage_early_is_found():
    """4+ stages: cooperative consumers keep a k-block of MMAs in flight; freeing its stage at issue
    (not after wgmma.wait_group 1) lets the producer refill it under the MMAs, which the model finds."""
    sim = _sim()
    args = [dict(P=P, tiles=2 * P + seed % 5, KT=2 + seed % 6, STAGES=4 + seed % 2, cluster=cluster,
                 pingpong=False, seed=seed, order_fix=True)
            for seed in range(100) for cluster, P in ((1, 3), (2, 4))]
    for a in args:
        sim.run(**a)  # the kernel's protocol: no violation
    found = 0
    for a in args:
        try:
            sim.run(**a, bug="early_release")
        except sim.Viol:
            found += 1
    assert found > len(args) // 2, found


def _coverage(sim, P, tiles, sk, KT, bounds):
    """How many times each (tile, k-block) is computed over every CTA's units."""
    seen = {}
    for b in range(P):
        for s, k0, k1, part, *_ in sim.units(b, P, tiles, sk, 1, KT, 1, bounds):
            for k in range(k0, k1):
                seen[s, k] = seen.get((s, k), 0) + 1
    return seen


def test_stream_k_runs_of_unequal_length_cover_each_k_block_once_without_a_violation():
    """The host's runs of unequal length (fo_lib.gemm.stream_k.stream_k_weighted, the kernel's sk_bounds):
    every (tile, k-block) computed once and no protocol violation, cooperative and ping-pong; a run
    shorter than a tile (which the host never gives) computes k-blocks twice, which the check finds."""
    import numpy as np

    from fo_lib.gemm.stream_k import stream_k_weighted
    sim = _sim()
    cases = 0
    for P, tiles, KT in ((3, 7, 4), (4, 9, 3), (2, 5, 5), (6, 13, 2)):
        for short in range(tiles):
            cost = np.ones(tiles)
            cost[short:] = 0.5  # the last tiles cheaper
            got = stream_k_weighted(tiles, P, KT, cost)
            if got is None:
                continue
            sk, bounds, _ = got
            bounds = [int(x) for x in bounds]
            assert set(_coverage(sim, P, tiles, sk, KT, bounds).values()) == {1}
            cases += 1
            for seed in range(20):
                for pp in (False, True):
                    sim.run(P=P, tiles=tiles, KT=KT, STAGES=3 + seed % 3, cluster=1, pingpong=pp, sk_tiles=sk,
                            sk_split=1, seed=seed, order_fix=True, bounds=bounds)
    assert cases >= 8
    assert max(_coverage(sim, 3, 5, 5, 4, [0, 5, 7, 20]).values()) == 2


def test_a_second_warpgroup_without_rows_keeps_the_protocol():
    """Tiles whose second cooperative warpgroup walks the stages without MMAs (idle_tiles): no
    violation with or without MMAs in flight, in clusters and with stream-K runs."""
    sim = _sim()
    for seed in range(60):
        for stages, cluster, P in ((3, 1, 3), (4, 1, 3), (5, 2, 4), (3, 2, 2)):
            tiles = P + 1 + seed % (2 * P)
            sk = P + seed % P if cluster == 1 and seed % 2 else 0
            tiles = max(tiles, sk)
            sim.run(P=P, tiles=tiles, KT=2 + seed % 4, STAGES=stages, cluster=cluster, pingpong=False,
                    sk_tiles=sk, sk_split=1 if sk else 0, seed=seed, order_fix=True,
                    idle_tiles=set(range(tiles - 1 - seed % 3, tiles)))


def test_a_walking_warpgroup_whose_warps_do_not_meet_is_found():
    """A warpgroup that walks stages without MMAs (a phantom unit, a warpgroup without rows) frees
    each with one thread's arrival; without the kernel's walk_bar its other warps can fall two phases
    behind on a full barrier (the LLM benchmark's hang of 5000 x 7168 x 8192), which the model finds;
    with it, none."""
    sim = _sim()
    args = [dict(P=P, tiles=tiles, KT=KT, STAGES=stages, cluster=cluster, pingpong=False, sk_tiles=sk,
                 sk_split=1 if sk else 0, seed=seed, order_fix=True, idle_tiles=set(range(tiles // 2, tiles)))
            for seed in range(40)
            for stages, cluster, P, tiles, KT, sk in ((3, 1, 3, 8, 6, 4), (4, 1, 3, 7, 5, 0), (3, 2, 4, 7, 4, 0))]
    for a in args:
        sim.run(**a)
    found = 0
    for a in args:
        try:
            sim.run(**a, bug="walk_unsynced")
        except sim.Viol as e:
            found += "behind" in str(e) or "deadlock" in str(e)
    assert found > len(args) // 4, found
