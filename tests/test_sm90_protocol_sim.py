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
