"""The end-to-end layer (Fig. 12) on one GPU over the loopback (emulated) link: the overlapped
Llama block and Mixtral combine step against the float64 reference and the non-overlapped layer,
a dropped residual caught, back-to-back calls alike, and the measurement's record."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import gemm  # noqa: E402
from fo_lib.comm.loopback import LoopbackCommunicator  # noqa: E402
from fo_lib.experiments import e2e_layer as E  # noqa: E402
from fo_lib.experiments.e2e_blocks import BlockShape  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]
# Per rank at W = 4: o_proj 1024 x 1024 x 256, down 1024 x 1024 x 1024; the MoE GEMM 1024 x 1024 x 2048.
DENSE = BlockShape("gpu-dense", 1024, 1024, 4096, heads=16, kv_heads=4, head_dim=64, world=2)
MOE = BlockShape("gpu-moe", 2048, 1024, 2048, experts=8, top_k=2, world=2)
PLAN_KW = dict(config=gemm.CONFIGS["64x64x32"], ctas=40)  # 256 tiles on 40 CTAs: 7 waves per GEMM


def _case(shape, W, **kw):
    return E.Case(shape, LoopbackCommunicator(W), device="cuda", plan_kw=PLAN_KW, **kw)


@pytest.mark.parametrize("W", [2, 4])
@pytest.mark.parametrize("layer", ["dense-sdpa", "dense-self", "moe"])
def test_the_layer_matches_float64_and_the_baseline_on_the_loopback(layer, W):
    case = _case(MOE, W) if layer == "moe" else _case(DENSE, W, attention=layer.split("-")[1])
    errs = E.check(case)
    torch.cuda.synchronize()
    for p in case.ours.plans:
        p.check()
        assert p.num_groups > 1, p.describe()
    assert errs["rel_err"] < E.TOLERANCE and errs["baseline_rel_err"] < E.TOLERANCE, errs
    assert errs["ours_vs_baseline"] < E.TOLERANCE, errs
    if layer != "moe":
        assert errs["residual_rel_err"] < E.TOLERANCE, errs


@pytest.mark.parametrize("shape", [DENSE, MOE], ids=["dense", "moe"])
def test_a_dropped_residual_fails_the_check_on_the_gpu(shape):
    case = _case(shape, 2)
    intact = case.ours
    zeros = torch.zeros_like(case.ours.inp.residual if shape.moe else case.args[1])
    case.ours = lambda x, *rest: intact(x, zeros)
    assert E.check(case)["rel_err"] > 10 * E.TOLERANCE


@pytest.mark.parametrize("shape", [DENSE, MOE], ids=["dense", "moe"])
def test_back_to_back_calls_give_the_same_layer(shape):
    """Eager calls reuse the plans' counting tables (epochs) and buffers: the tenth call gives what
    the first gave."""
    case = _case(shape, 2)
    first = [t.clone() for t in case.outputs(case.ours)]
    for _ in range(9):
        last = case.outputs(case.ours)
    torch.cuda.synchronize()
    for a, b in zip(first, last):
        assert calc_diff(b, a.double()) < 1e-6


def test_measure_records_every_column_on_the_emulated_link(tmp_path):
    df = E.measure(shapes=E.SHAPES["small"], worlds=[2], rounds=2, inner=1)
    assert tuple(df.columns) == E.COLUMNS and len(df) == 2
    assert df.link.str.contains("emulated").all() and (df.world_size == 2).all()
    assert (df.ours_ms > 0).all() and (df.baseline_ms > 0).all() and (df.rel_err < E.TOLERANCE).all()
    path = E.record(df, tmp_path / "e2e_layer.csv")
    assert path.with_suffix(".meta.json").exists()
