"""The Hopper GEMM's twins of one tile (clusters of 2 sharing A or B by TMA multicast, ping-pong
consumers, direct C) against the single-CTA tile, bit for bit, and the cluster's CTA-count rules."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import gemm  # noqa: E402
from fo_lib.gemm import sm90 as gemm_sm90  # noqa: E402
from fo_lib.gemm.sm90 import launch as sm90_launch  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402
from gemm_helpers import DTYPES, TOL, guarded_out, inputs, ref  # noqa: E402
from sm90_cases import NEEDS_SM90  # noqa: E402

pytestmark = [pytest.mark.gpu, NEEDS_SM90]


# Odd tile counts (a phantom unit), odd tile rows (edge bands whose pairs share A or nothing), N tails
# inside and past the first half of B (a half box wholly out of bounds), grids smaller than ctas.
CLUSTER_SHAPES = [(1100, 1792, 520), (300, 130, 72), (129, 100, 8), (2048, 4096, 1024), (777, 1000, 4104)]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("tile,twin", [("128x256x64", "128x256x64c2"), ("128x128x64", "128x128x64c2"),
                                       ("128x176x64", "128x176x64c2"), ("128x208x64", "128x208x64c2"),
                                       ("128x176x64", "128x176x64p"), ("128x176x64", "128x176x64c2p"),
                                       ("128x128x64", "128x128x64c2p"), ("128x176x64", "128x176x64pd"),
                                       ("128x168x64", "128x168x64pd")])
@pytest.mark.parametrize("M,N,K", CLUSTER_SHAPES)
def test_cluster_equals_single_cta_bitwise(M, N, K, tile, twin, dtype):
    """The same tiles with and without clusters (or ping-pong consumers, or direct C) sum the same k-blocks in the
    same order: equal bit for bit, over rasters that pair tiles down a tile column (row 2; row 3 all but across bands) or
    only on a one-column grid (col 4, row 1), and CTA counts down to one cluster; and within
    tolerance of float64."""
    a, b = inputs(M, N, K, dtype, seed=M + N + K)
    want = ref(a, b)
    for order, swizzle in (("row", 2), ("row", 3), ("col", 4), ("row", 1)):
        for ctas in (2, 6, 132):
            c1 = gemm_sm90.CONFIGS[tile].with_raster(order, swizzle)
            c2 = gemm_sm90.CONFIGS[twin].with_raster(order, swizzle)
            buf, out, mask = guarded_out(M, N, dtype)
            gemm_sm90.gemm_nt(a, b, out, config=c2, ctas=ctas)
            torch.cuda.synchronize()
            assert not torch.isnan(out).any(), f"unwritten elements ({order}{swizzle}, {ctas} CTAs)"
            assert torch.isnan(buf[~mask]).all(), "the kernel wrote outside the output view"
            assert calc_diff(out, want) < TOL[dtype]
            single = gemm_sm90.gemm_nt(a, b, config=c1, ctas=ctas)
            assert torch.equal(out, single), f"cluster != single CTA ({order}{swizzle}, {ctas} CTAs)"


def test_cluster_needs_an_even_cta_count():
    a, b = inputs(256, 512, 64, "bf16", seed=5)
    with pytest.raises(gemm.GemmError, match="multiple of 2"):
        gemm_sm90.gemm_nt(a, b, config=gemm_sm90.CONFIGS["128x256x64c2"], ctas=7)


def test_cluster_capacity_is_known():
    """The driver's count of resident clusters of 2: at least one, at most one per pair of SMs."""
    clustered = [c for c in gemm_sm90.CONFIGS.values() if c.cluster == 2]
    assert clustered
    for cfg in clustered:
        assert 1 <= gemm_sm90.cluster_capacity(cfg) <= gemm.sm_count() // 2


def test_a_cluster_default_runs_on_an_odd_cta_count(monkeypatch):
    """The default pick is made for the SM count (even: clusters allowed); where it is a cluster
    config, an odd ``ctas`` runs the same tiles one CTA at a time instead of refusing the call."""
    picked = gemm_sm90.CONFIGS["128x128x64c2"].with_raster("row", 2)
    monkeypatch.setattr(sm90_launch, "default_config", lambda *args, **kw: picked)  # whatever the table says
    M, N, K = 1100, 1792, 5120
    a, b = inputs(M, N, K, "bf16", seed=9)
    assert gemm_sm90.config_for(a, b, ctas=131) == picked.for_ctas(131)
    assert picked.for_ctas(131).cluster == 1 and picked.for_ctas(131).BN == 128
    out = gemm_sm90.gemm_nt(a, b, ctas=131)
    assert calc_diff(out, ref(a, b)) < TOL["bf16"]
