"""The Hopper GEMM's consumer protocol (operand ring, C staging, stream-K flags, clusters, ping-pong
order barriers) in a random-interleaving model with mbarrier parity semantics: no violation with the
kernel's barriers; without the C-staging order (epi[c]) the model finds ping-pong's race, so it can fail."""
import importlib.util
import io
from contextlib import redirect_stdout
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "scripts" / "tooling" / "sm90_protocol_sim.py"


def _sim():
    spec = importlib.util.spec_from_file_location("sm90_protocol_sim", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
