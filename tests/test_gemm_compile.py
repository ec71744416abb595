"""CPU checks of the GEMM kernel family's host logic (configs, heuristic, source generation); the
sources themselves are compiled for every target by tests/test_kernels.py."""
import pytest

from fo_lib import gemm
from fo_lib.tiling import TileGrid

SOURCES = list(gemm.compile_check_sources())


def test_compile_check_covers_every_config_and_instantiation_in_bf16_and_each_instantiation_in_f16():
    labels = {label for label, _ in SOURCES}
    first = next(iter(gemm.CONFIGS))
    assert gemm.DTYPES == ("bf16", "f16")
    for cname in gemm.CONFIGS:
        for epi in gemm.PORTABLE_KERNELS:
            assert f"gemm {cname} bf16 {epi}" in labels
            assert (f"gemm {cname} f16 {epi}" in labels) == (cname == first)


def test_kernel_names_unique():
    names = [gemm.generate_source(cfg, d, e)[1] for cfg in gemm.CONFIGS.values()
             for d in gemm.DTYPES for e in gemm.PORTABLE_KERNELS]
    assert len(names) == len(set(names))


def test_rows_and_tile_places_share_one_kernel():
    # One instantiation chooses the layout per launch (its main loop then schedules like plain's).
    cfg = gemm.CONFIGS["256x128x64"]
    rows, tiles = (gemm.generate_source(cfg, "bf16", e) for e in ("signal_rows", "signal_tiles"))
    assert rows == tiles and rows[1].endswith("_signal_store")
    assert gemm.PORTABLE.kernel_of("signal_tiles") == gemm.PORTABLE.kernel_of("signal_rows") == "signal_store"
    with pytest.raises(gemm.GemmError, match="epilogue must be one of"):
        gemm.generate_source(cfg, "bf16", "signal_table")


def test_generate_source_ignores_raster():
    cfg = gemm.CONFIGS["128x256x32"]
    assert gemm.generate_source(cfg, "bf16", "plain") == \
        gemm.generate_source(cfg.with_raster("col", 4), "bf16", "plain")


@pytest.mark.parametrize("kw,match", [
    (dict(BK=16), "BK"),
    (dict(BN=96), "BN"),
    (dict(BM=120), "BM"),
    (dict(stages=1), "stages"),
    (dict(order="diag"), "order"),
    (dict(swizzle=0), "swizzle"),
    (dict(BM=256, BN=256, warps_m=2, warps_n=4), "registers|shared"),
    (dict(BM=256, BN=256, BK=64, warps_m=4, warps_n=4, stages=4), "shared"),
])
def test_config_validate_rejects(kw, match):
    with pytest.raises(gemm.GemmError, match=match):
        gemm.GemmConfig(**kw).validate()


def test_configs_properties():
    c = gemm.CONFIGS["128x256x32"]
    assert c.threads == 256 and c.warp_tile == (64, 64)
    assert c.smem_bytes == 2 * (4 * 384 * 32 + 128 * 256) + 8 * 128
    assert all(cfg.smem_bytes <= 227 * 1024 for cfg in gemm.CONFIGS.values())
    with pytest.raises(gemm.GemmError):
        gemm.generate_source(c, "fp32", "plain")
    with pytest.raises(gemm.GemmError):
        gemm.generate_source(c, "bf16", "nope")


@pytest.mark.parametrize("M,N,K", [(1, 8, 8), (64, 64, 64), (512, 512, 1024), (4096, 4096, 4096),
                                   (8192, 8192, 8192), (16384, 4096, 1024), (300, 70000, 64),
                                   (2048, 1024, 8192)])
def test_default_config(M, N, K):
    cfg = gemm.default_config(M, N, K, 132)
    cfg.validate()
    grid = cfg.grid(M, N, 132)
    assert grid == TileGrid(M, N, cfg.BM, cfg.BN, order=cfg.order, swizzle=cfg.swizzle, sm_count=132, _ctas=132)
    assert grid.num_tiles >= 1 and grid.ctas == 132
    if M * N <= 64 * 64 * 132:
        assert (cfg.BM, cfg.BN) == (64, 64)  # tiny: spread over the SMs
    if M >= 4096 and N >= 4096:
        assert cfg.BM * cfg.BN == 128 * 256  # big: the big tile
    # Smaller shared memory (A100, sm_86/89): a config that fits.
    for limit in (166912, 101376):
        small = gemm.default_config(M, N, K, 108, limit)
        assert small.smem_bytes <= limit


def test_default_config_rejects():
    with pytest.raises(gemm.GemmError):
        gemm.default_config(0, 8, 8, 132)
    with pytest.raises(gemm.GemmError, match="no GEMM config fits"):
        gemm.default_config(8, 8, 8, 132, 1000)


def test_import_without_gpu_libraries():
    # fo_lib.gemm must import on a CPU-only machine: torch/cupy are imported only at launch.
    import subprocess
    import sys
    code = ("import sys; sys.modules['cupy'] = None; sys.modules['torch'] = None\n"
            "import fo_lib.gemm as g; print(g.default_config(1024, 1024, 1024, 132).tile_name)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
