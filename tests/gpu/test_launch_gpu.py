"""GPU checks of the prepared launch path (fo_lib.jit.PreparedLaunch, LaunchMemo): a memoized
launch computes on whatever its tensors hold now, new tensors get their own launch, a memo hit
never skips the checks of a different call, and a thread with no current context still launches."""
import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import gemm, jit, postops  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402
from gemm_helpers import TOL  # noqa: E402
from gemm_helpers import inputs as _inputs  # noqa: E402
from gemm_helpers import ref as _ref  # noqa: E402

pytestmark = pytest.mark.gpu

FAMILIES = ["portable"] + (["sm90"] if torch.cuda.get_device_capability() == (9, 0) else [])


def _family(name):
    if name == "portable":
        return gemm.PORTABLE, gemm.default_config(520, 700, 264, gemm.sm_count())
    from fo_lib.gemm import sm90 as gemm_sm90
    return gemm_sm90.SM90, gemm_sm90.default_config(520, 700, 264, gemm.sm_count())


@pytest.mark.parametrize("family", FAMILIES)
def test_memoized_gemm_reads_current_contents(family):
    fam, cfg = _family(family)
    a, b = _inputs(520, 700, 264, "bf16", seed=5)
    out = torch.full((520, 700), float("nan"), dtype=torch.bfloat16, device="cuda")
    for i in range(3):  # same tensors, new contents: the memo's launch must compute on them
        a.normal_()
        out.fill_(float("nan"))
        fam.gemm_nt(a, b, out, config=cfg)
        torch.cuda.synchronize()
        assert calc_diff(out, _ref(a, b)) < TOL["bf16"], f"call {i}"
    key = jit.memo_key(("plain", cfg, None), a, b, out)
    stored = fam._memo.get(key)
    assert stored is not None, "the call's launch must be in the memo"
    fam.gemm_nt(a, b, out, config=cfg)
    assert fam._memo.get(key) is stored, "a repeated call must reuse its launch"


@pytest.mark.parametrize("family", FAMILIES)
def test_new_outputs_and_reused_addresses(family):
    fam, cfg = _family(family)
    a, b = _inputs(520, 700, 264, "bf16", seed=6)
    want = _ref(a, b)
    kept = [fam.gemm_nt(a, b, config=cfg) for _ in range(3)]  # all alive: three addresses
    assert len({t.data_ptr() for t in kept}) == 3
    for t in kept:
        assert calc_diff(t, want) < TOL["bf16"]
    for _ in range(3):  # freed and reallocated (usually at the same address): still right
        out = fam.gemm_nt(a, b, config=cfg)
        torch.cuda.synchronize()
        assert calc_diff(out, want) < TOL["bf16"]
        del out


@pytest.mark.parametrize("family", FAMILIES)
def test_memo_hit_never_skips_checks(family):
    fam, cfg = _family(family)
    a, b = _inputs(520, 700, 264, "bf16", seed=7)
    out = torch.empty(520, 700, dtype=torch.bfloat16, device="cuda")
    fam.gemm_nt(a, b, out, config=cfg)
    with pytest.raises(gemm.GemmError, match="K mismatch"):
        fam.gemm_nt(a, b[:, :256].contiguous(), out, config=cfg)
    with pytest.raises(gemm.GemmError, match="out must be"):
        fam.gemm_nt(a, b, out.float(), config=cfg)
    with pytest.raises(gemm.GemmError, match="out must be"):
        fam.gemm_nt(a, b, out[:, :699], config=cfg)  # same address, another shape


def test_launch_from_a_new_thread():
    """A thread on which nothing has made the device's context current (the driver call must
    still find it) computes the same result."""
    a, b = _inputs(300, 500, 1000, "f16", seed=8)
    out = torch.full((300, 500), float("nan"), dtype=torch.float16, device="cuda")
    errors = []

    def work():
        try:
            gemm.gemm_nt(a, b, out)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - reported in the main thread
            errors.append(exc)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    assert calc_diff(out, _ref(a, b)) < TOL["f16"]


def test_post_reorder_memo_gives_each_call_its_output():
    R, N, BN = 64, 1024, 128
    x = torch.randn(R, N, device="cuda").bfloat16()
    table = (torch.arange(R, device="cuda")[:, None] * N
             + torch.arange(N // BN, device="cuda")[None, :] * BN).to(torch.int64).contiguous()
    first = postops.post_reorder(x.reshape(-1), table, (R, N), BN)
    x2 = x * 2
    second = postops.post_reorder(x2.reshape(-1), table, (R, N), BN)
    assert first.data_ptr() != second.data_ptr()
    assert torch.equal(first, x) and torch.equal(second, x2)
    with pytest.raises(ValueError, match="src_offset must have shape"):
        postops.post_reorder(x.reshape(-1), table[:, :4].contiguous(), (R, N), BN)
