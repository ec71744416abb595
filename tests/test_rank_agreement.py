"""Ranks must agree on a plan before its first collective, and a stalled peer must surface as an
error that names the plan (torchrun + gloo, tests/workers/plan_agreement.py)."""
import re
from pathlib import Path

import pytest

from gloo_ranks import torchrun

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
