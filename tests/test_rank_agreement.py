"""Ranks must agree on a plan before its first collective and on every call, and a stalled or dead
peer must surface on every other rank as an error that names the plan, within the plan's timeout,
after which the process exits without an abort (torchrun + gloo, tests/workers/plan_agreement.py;
gloo ranks forked from a warm interpreter, tests/workers/rank_faults.py)."""
import re
import time
from pathlib import Path

import pytest

from gloo_ranks import spawn_ranks, torchrun

WORKER = Path(__file__).parent / "workers" / "plan_agreement.py"
FIELDS = ("primitive", "M", "N", "K", "dtype", "config", "schedule", "ctas", "partition", "layout",
          "reduction", "routing", "grid")


def _torchrun(world_size: int, mode: str, timeout: float) -> str:
    rc, out = torchrun(world_size, [str(WORKER), mode], timeout=timeout)
    assert rc == 0, out[-3000:]
    assert "FAIL" not in out, "\n".join(line for line in out.splitlines() if "FAIL" in line)
    return out


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.parametrize("world_size", [2, 3])
def test_every_rank_names_the_first_field_that_differs(world_size):
    out = _torchrun(world_size, "mismatch", 240)
    for field in FIELDS:
        for rank in range(world_size):
            assert f"ok {field} (rank {rank})" in out, (field, rank, out[-3000:])
    for rank in range(world_size):
        assert f"ok early failure (rank {rank})" in out, out[-3000:]
        assert f"ok agreeing plan (rank {rank})" in out, out[-3000:]


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_a_stalled_peer_fails_the_call_within_the_plans_timeout():
    out = _torchrun(2, "stall", 100)
    assert re.search(r"ok stall after [0-9.]+ s: rank 0 of 2: the all_reduce of group 1", out), out[-3000:]
    assert "ok stall (the stalled rank)" in out
    assert "ok broken plan refuses" in out


@pytest.mark.multiproc
@pytest.mark.timeout(300)
@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_calling_different_plans_raise_on_every_rank(world_size):
    out = _torchrun(world_size, "mixed", 240)
    for rank in range(world_size):
        assert out.count(f"ok mixed (rank {rank})") == 2, out[-3000:]
        assert f"ok refused (rank {rank})" in out, out[-3000:]
        for M in (512, 1024):
            assert f"ok usable M={M} (rank {rank})" in out, out[-3000:]


FAULTS = Path(__file__).parent / "workers" / "rank_faults.py"
TIMEOUT_S = 2.0
# What the plan's docstring promises beyond timeout_ms (raise) and what exiting may add; generous
# for shared CI cores, where measured values are about 0.1 s and 1 s.
RAISE_MARGIN_S, EXIT_MARGIN_S = 2.0, 10.0


@pytest.mark.multiproc
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("case", ["stall", "die", "stall-at-build", "die-at-build"])
def test_a_stalled_or_dead_peer_makes_every_survivor_raise_and_exit_in_time(case, world_size):
    procs = spawn_ranks(world_size, [str(FAULTS), case, str(TIMEOUT_S * 1000)])
    try:
        for rank, proc in enumerate(procs[:-1]):
            out, _ = proc.communicate(timeout=60)
            exited = time.time()
            found = re.search(rf"ok {case} raised CollectiveError after ([0-9.]+) s at ([0-9.]+)", out)
            assert found and proc.returncode == 0, (rank, proc.returncode, out[-3000:])
            took, raised_at = float(found.group(1)), float(found.group(2))
            assert took <= TIMEOUT_S + RAISE_MARGIN_S, (rank, took, out[-2000:])
            assert exited - raised_at <= EXIT_MARGIN_S, (rank, exited - raised_at)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


@pytest.mark.multiproc
def test_a_forked_rank_runs_its_script_with_its_environment_and_an_abort_at_exit_shows(tmp_path):
    """The ranks below are forked from a warm interpreter (tests/gloo_ranks.py): each must still run
    its own script as __main__ with its own RANK and arguments, and an abort at exit must reach the
    test as the signal (the bug the twenty runs guard against)."""
    script = tmp_path / "abort_at_exit.py"
    script.write_text("import atexit, os, sys\n"
                      "print(__name__, os.environ['RANK'], os.environ['WORLD_SIZE'], sys.argv[1:], flush=True)\n"
                      "if os.environ['RANK'] == '1':\n    atexit.register(os.abort)\n")
    procs = spawn_ranks(2, [str(script), "x"])
    outs = [proc.communicate(timeout=60)[0] for proc in procs]
    assert outs == ["__main__ 0 2 ['x']\n", "__main__ 1 2 ['x']\n"]
    assert [proc.returncode for proc in procs] == [0, -6]


@pytest.mark.multiproc
@pytest.mark.timeout(400)
def test_three_ranks_exit_without_an_abort_twenty_times():
    aborted = []
    for run in range(20):
        procs = spawn_ranks(3, [str(FAULTS), "clean", "10000"])
        for rank, proc in enumerate(procs):
            out, _ = proc.communicate(timeout=60)
            if proc.returncode != 0 or f"ok clean (rank {rank})" not in out:
                aborted.append((run, rank, proc.returncode, out[-500:]))
    assert not aborted, aborted


class _TwoRanks:
    """Rank 0 of two, whose peer answers every exchange with ``peer(my row)``: the per-call check's
    outcomes in one process (build-time agreement sees two equal plans)."""

    link, sm_footprint, copy_engine, world_size, rank = "fake", 0, False, 2, 0

    def __init__(self):
        self.peer = lambda row: row.clone()

    def all_gather_object(self, obj, **kw):
        return [obj, obj]

    def all_reduce(self, buf, *, timeout_s=None):
        buf.mul_(2)

    def all_gather(self, send, recv, *, timeout_s=None):
        recv[:4], recv[4:] = send, self.peer(send)


def test_the_call_check_names_both_plans_and_resynchronises_counts():
    import torch

    from fo_lib import gemm
    from fo_lib.engine import OverlapPlan, PlanError

    comm = _TwoRanks()
    plans = [OverlapPlan("all_reduce", M, 128, 16, comm, device="cpu", config=gemm.CONFIGS["64x64x32"], ctas=2,
                         sm_count=2) for M in (512, 1024)]
    a, b = torch.ones(512, 16).bfloat16(), torch.ones(128, 16).bfloat16()
    want = torch.full((512, 128), 32.0)
    comm.peer = lambda row: torch.tensor([plans[1]._call_check.digest, 0, 0, 0])
    with pytest.raises(PlanError, match=r"rank 0: run of all_reduce 512x128x16.*rank 1: run of all_reduce 1024x128x16"):
        plans[0].run(a, b)
    comm.peer = lambda row: row.clone() + torch.tensor([0, 3, 0, 0])  # the peer is 3 calls further
    with pytest.raises(PlanError, match="rank 0: after 0 calls, rank 1: after 3 calls"):
        plans[0].run(a, b)
    comm.peer = lambda row: row.clone()
    assert plans[0]._call_check.calls == 3 and torch.equal(plans[0].run(a, b).float(), want)
    comm.peer = lambda row: row.clone() + torch.tensor([0, 0, 0, 1])  # the peer refused its inputs
    with pytest.raises(PlanError, match=r"rank\(s\) \[1\] refused"):
        plans[0].run(a, b)
    comm.peer = lambda row: row.clone()
    assert plans[0]._call_check.calls == 4 and torch.equal(plans[0].run(a, b).float(), want)
