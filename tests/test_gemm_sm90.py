"""CPU checks of the sm_90a GEMM's host logic: configs, heuristic, source generation, tensor-map
geometry, and ptxas' report for every specialization (no spills, setmaxnreg honoured, wgmma not
serialized). Plain compile checks of the same sources run in tests/test_kernels.py (sm_90a only)."""
import re
from dataclasses import replace

import pytest

from fo_lib import gemm, jit
from fo_lib.gemm import sm90 as gemm_sm90
from fo_lib.gemm.sm90 import launch as sm90_launch, stream_k_tail
from fo_lib.gemm.config import MAX_SMEM
from fo_lib.gemm.wgmma import wgmma_source
from fo_lib import kernel_catalog as catalog
from fo_lib.tiling import TileGrid

SOURCES = list(gemm_sm90.compile_check_sources())
VARIANTS = gemm_sm90.compiled_variants()



def test_compile_check_covers_every_config_dtype_epilogue_with_and_without_a_stream_k_tail():
    labels = {label for label, _ in SOURCES}
    singles = {n for n, c in gemm_sm90.CONFIGS.items() if c.cluster == 1}
    assert set(VARIANTS) == set(gemm_sm90.CONFIGS) | {f"{n}+sk" for n in singles}
    for label, cfg in VARIANTS.items():  # the tail is a template argument: the +sk kernels alone compile it
        targs = re.search(r"gemm_sm90_body<([^>]*)>", gemm_sm90.generate_source(cfg, "bf16", "plain")[0]).group(1)
        assert targs.split(", ")[-1] == ("true" if label.endswith("+sk") else "false"), (label, targs)
        assert cfg.stream_k == label.endswith("+sk") and cfg.kernel_id.endswith("_sk") == cfg.stream_k
    # bf16: every variant; f16: the first variant of each code path (ping-pong, direct C, cluster, tail)
    assert gemm.DTYPES == ("bf16", "f16")
    paths = {}
    for cname, cfg in VARIANTS.items():
        paths.setdefault(gemm_sm90.code_path(cfg), cname)
    assert len(paths) == 8
    # each in the epilogues a call launches it with: every one, and with a stream-K tail the plain store only
    epis = {cname: gemm_sm90.variant_epilogues(cfg) for cname, cfg in VARIANTS.items()}
    assert all(epis[n] == (gemm.EPILOGUES if not n.endswith("+sk") else ("plain",)) for n in VARIANTS)
    assert len(labels) == len(SOURCES) == sum(len(epis[n]) for n in VARIANTS) + sum(
        len(epis[n]) for n in paths.values())
    assert len(labels) == 204  # 26 configs x 6 + 15 stream-K tails x 1 in bf16; 5 x 6 + 3 x 1 in f16
    for cname in VARIANTS:
        for epi in gemm.EPILOGUES:
            assert (f"gemm_sm90 {cname} bf16 {epi}" in labels) == (epi in epis[cname])
            assert (f"gemm_sm90 {cname} f16 {epi}" in labels) == (cname in paths.values() and epi in epis[cname])
    assert labels <= {label for label, _ in catalog.compile_check_sources("sm_90a")}
    assert not labels & {label for label, _ in catalog.compile_check_sources("sm_80")}


@pytest.fixture(scope="module")
def built():
    """Every source compiled once into the disk cache, in parallel (the compile check of
    tests/test_kernels.py shares the entries, ptxas' report included)."""
    try:
        jit.nvrtc_version()
    except jit.CudaUnavailableError:
        return  # each test's nvrtc fixture skips, or fails in CI
    catalog.build_cases((label, source, "sm_90a") for label, source in SOURCES)


@pytest.mark.parametrize("label,source", SOURCES, ids=[label for label, _ in SOURCES])
def test_ptxas_report(label, source, nvrtc, built):
    """No local memory, and neither C7508 (setmaxnreg ignored) nor C7510 (wgmma serialized)."""
    cubin, log = jit.cached_compile(source, "sm_90a")
    assert cubin[:4] == b"\x7fELF"
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in log, log
    assert not re.search(r"C75\d\d|warning", log, re.IGNORECASE), log
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    assert regs <= 168, f"{regs} registers at entry: 384 threads x {regs} overcommit the register file"


@pytest.mark.parametrize("cname", list(gemm_sm90.CONFIGS))
def test_smem_bytes_matches_device_code(cname, nvrtc):
    """Sm90Config.smem_bytes is the same sum as Sm90Shape::SMEM_BYTES (checked by the compiler)."""
    cfg = gemm_sm90.CONFIGS[cname]
    shape = f"fo::Sm90Shape<{cfg.BN}, {cfg.stages}, {str(cfg.pingpong).lower()}, {str(cfg.direct_c).lower()}>"
    src = (f'#include "gemm_sm90.cuh"\n'
           f"static_assert({shape}::SMEM_BYTES == {cfg.smem_bytes}, \"smem\");\n"
           f"static_assert({shape}::BM == {cfg.BM}, \"BM\");\n"
           f"static_assert({shape}::BK == {cfg.BK}, \"BK\");\n"
           f"static_assert({shape}::THREADS == {cfg.threads}, \"threads\");\n"
           'extern "C" __global__ void k(int* x) { x[0] = 1; }\n')
    jit.compile_cubin(src, "sm_90a")


def test_kernel_names_unique_and_distinct_from_portable():
    names = [gemm_sm90.generate_source(cfg, d, e)[1] for cfg in VARIANTS.values()
             for d in gemm.DTYPES for e in gemm_sm90.variant_epilogues(cfg)]
    assert len(names) == len(set(names))
    portable = {gemm.generate_source(cfg, d, e)[1] for cfg in gemm.CONFIGS.values()
                for d in gemm.DTYPES for e in gemm.EPILOGUES}
    assert not set(names) & portable


def test_generate_source_ignores_raster_and_checks_inputs():
    cfg = gemm_sm90.CONFIGS["128x256x64"]
    assert gemm_sm90.generate_source(cfg, "bf16", "plain") == \
        gemm_sm90.generate_source(cfg.with_raster("col", 4), "bf16", "plain")
    with pytest.raises(gemm.GemmError, match="dtype"):
        gemm_sm90.generate_source(cfg, "fp32", "plain")
    with pytest.raises(gemm.GemmError, match="epilogue"):
        gemm_sm90.generate_source(cfg, "bf16", "nope")
    with pytest.raises(gemm.GemmError, match="Sm90Config"):
        gemm_sm90.generate_source(gemm.CONFIGS["128x256x64"], "bf16", "plain")
    # The probe, the signal and the scatter run whole waves (a config without its tail): no such kernels.
    for epi in gemm.EPILOGUES[1:]:
        with pytest.raises(gemm.GemmError, match=f"only the plain store has a stream-K tail; the {epi} epilogue"):
            gemm_sm90.generate_source(replace(cfg, stream_k=True), "bf16", epi)
        assert gemm.config.EPILOGUE_POLICY[epi] in gemm_sm90.generate_source(cfg, "bf16", epi)[0]
    assert "fo::epi::Plain" in gemm_sm90.generate_source(replace(cfg, stream_k=True), "bf16", "plain")[0]


@pytest.mark.parametrize("kw,match", [
    (dict(BN=204), "multiple of 8"),
    (dict(BN=168, stages=4, cluster=2), "clusters"),
    (dict(BN=168, stages=4, direct_c=True, cluster=2), "multiple of 16"),
    (dict(BN=64), "BN"),
    (dict(BN=272), "BN"),
    (dict(stages=1), "stages"),
    (dict(stages=9), "stages"),
    (dict(BN=256, stages=4), "shared memory"),
    (dict(BN=128, stages=7), "shared memory"),
    (dict(order="diag"), "order"),
    (dict(swizzle=0), "swizzle"),
    (dict(BN=True), "BN"),
    (dict(stages=2.0), "stages"),
    (dict(BN=168, stages=5, pingpong=True, direct_c=True, cluster=2), "single CTAs"),
    (dict(BN=176, stages=5, pingpong=True, direct_c=True, cluster=2), "single CTAs"),
    (dict(BN=208, stages=4, pingpong=True, direct_c=True), "ping-pong keeps BN"),
    (dict(direct_c=1), "direct_c"),
    (dict(BN=256, stages=5, direct_c=True), "shared memory"),
    (dict(BN=256, stages=4, direct_c=True), "only ping-pong consumers store C themselves"),
    (dict(BN=224, stages=4, direct_c=True, cluster=2), "only ping-pong consumers store C themselves"),
])
def test_config_validate_rejects(kw, match):
    with pytest.raises(gemm.GemmError, match=match):
        gemm_sm90.Sm90Config(**kw).validate()


@pytest.fixture
def guess_picker(monkeypatch):
    """The table-free picker these tests describe, even on a GPU that has a measured tile table
    (tests/test_gemm_sm90_tiles.py covers the table's)."""
    monkeypatch.setenv("FO_SM90_TILES", "guess")


def test_config_properties():
    big, small = gemm_sm90.CONFIGS["128x256x64"], gemm_sm90.CONFIGS["128x128x64"]
    assert (big.BM, big.BN, big.BK, big.threads) == (128, 256, 64, 384)
    assert big.smem_bytes == 1024 + 3 * 384 * 128 + 128 * 256 * 2 + 1024 + 8 * 8
    assert all(c.smem_bytes <= 227 * 1024 for c in gemm_sm90.CONFIGS.values())
    assert gemm_sm90.Sm90Config(128, 6).validate().smem_bytes <= 227 * 1024  # the deepest BN=128 ring
    assert small.BN == 128 and small.stages >= 4
    g = big.with_raster("col", 3).grid(1000, 3000, 100)
    assert g == TileGrid(1000, 3000, 128, 256, order="col", swizzle=3, _ctas=100)
    assert g.num_waves == -(-(8 * 12) // 100)


@pytest.mark.parametrize("M,N,K", [(1, 8, 8), (64, 64, 64), (512, 512, 1024), (4096, 4096, 4096),
                                   (8192, 8192, 8192), (16384, 4096, 1024), (300, 70000, 64),
                                   (2048, 1024, 8192), (128 * 132, 256, 4096)])
def test_default_config(M, N, K, guess_picker):
    cfg = gemm_sm90.default_config(M, N, K, 132)
    assert isinstance(cfg, gemm_sm90.Sm90Config)
    cfg.validate()
    grid = cfg.grid(M, N, 132)
    assert grid.ctas == 132 and grid.num_tiles >= 1
    if M >= 4096 and N >= 4096:
        assert cfg.BN == 256
    if grid.num_tiles <= 132:
        assert cfg.swizzle == 1
    else:
        assert cfg.swizzle == min(8, grid.tiles_m)
    # The small tile wins only when its padded work (waves x tile area / speed) is lower.
    big = gemm_sm90.CONFIGS["128x256x64"].grid(M, N, 132)
    if cfg.BN == 128:
        assert grid.num_waves * 128 * 128 / 0.9 < big.num_waves * 128 * 256


def test_default_config_prefers_small_tile_when_it_pads_less(guess_picker):
    # N = 384: 128 x 256 tiles pad it to 512 (264 tiles, 2 waves, 2 x 32768 elements per CTA);
    # 128 x 128 tiles fit exactly (396 tiles, 3 waves, 3 x 16384 elements per CTA).
    cfg = gemm_sm90.default_config(128 * 132, 384, 4096, 132)
    assert cfg.BN == 128


def test_default_config_rejects(guess_picker):
    with pytest.raises(gemm.GemmError):
        gemm_sm90.default_config(0, 8, 8, 132)
    with pytest.raises(gemm.GemmError, match="no sm90 GEMM config fits"):
        gemm_sm90.default_config(8, 8, 8, 132, 1000)


def test_tma_desc_fields():
    f = gemm_sm90.tma_desc_fields(rows=1000, cols=4096, row_stride=4104, box_rows=128)
    assert f == dict(global_dim=(4096, 1000), global_strides=(8208,), box_dim=(64, 128), element_strides=(1, 1))
    # One row: its stride is unused but must be legal.
    assert gemm_sm90.tma_desc_fields(1, 24, 3, 256)["global_strides"] == (48,)
    # K tails and boxes larger than the matrix are fine (TMA zero-fills).
    assert gemm_sm90.tma_desc_fields(5, 8, 8, 128)["box_dim"] == (64, 128)
    with pytest.raises(gemm.GemmError, match="stride"):
        gemm_sm90.tma_desc_fields(10, 64, 68, 128)
    with pytest.raises(gemm.GemmError, match="stride"):
        gemm_sm90.tma_desc_fields(10, 64, 32, 128)
    with pytest.raises(gemm.GemmError, match="box"):
        gemm_sm90.tma_desc_fields(10, 64, 64, 512)
    with pytest.raises(gemm.GemmError, match="empty"):
        gemm_sm90.tma_desc_fields(0, 64, 64, 128)


def test_import_without_gpu_libraries():
    import subprocess
    import sys
    code = ("import sys; sys.modules['cupy'] = None; sys.modules['torch'] = None; sys.modules['cuda'] = None\n"
            "import fo_lib.gemm.sm90 as g; print(g.default_config(1024, 1024, 1024, 132).tile_name)\n"
            "assert not g.is_supported()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("n", [128, 176, 208, 256])
def test_wgmma_source_has_one_operand_per_accumulator(n):
    src = wgmma_source(n)
    assert f"struct Wgmma<{n}>" in src
    for ptx in ("bf16", "f16"):
        assert f"m64n{n}k16.f32.{ptx}.{ptx} {{" in src
    # Per overload: n / 2 accumulators, then the two descriptors and scale_d.
    assert src.count('"+f"(d[') == n and f'"+f"(d[{n // 2 - 1}])' in src and f'"+f"(d[{n // 2}])' not in src
    assert f"%{n // 2 + 2}, 0;" in src and f"}}, %{n // 2}, %{n // 2 + 1}, p," in src


@pytest.mark.parametrize("n", [0, 12, 264, True, 128.0])
def test_wgmma_source_rejects_widths_wgmma_lacks(n):
    with pytest.raises(gemm.GemmError, match="multiple of 8"):
        wgmma_source(n)


def test_every_config_width_has_its_wgmma_in_its_source():
    for cfg in gemm_sm90.CONFIGS.values():
        src, _ = gemm_sm90.generate_source(cfg, "bf16", "plain")
        assert f"struct Wgmma<{cfg.BN}>" in src and src.index('#include "gemm_sm90.cuh"') < src.index("struct Wgmma")


def test_mid_width_configs_take_the_deepest_ring_that_fits():
    for bn in gemm_sm90.MID_WIDTHS:
        for cname in (f"128x{bn}x64", f"128x{bn}x64c2"):
            cfg = gemm_sm90.CONFIGS[cname]
            assert cfg.BN == bn and cfg.smem_bytes <= MAX_SMEM
            assert cfg.stages == 5 or replace(cfg, stages=cfg.stages + 1).smem_bytes > MAX_SMEM
    # C rows: 22 chunks (176) padded to 23, 24 chunks (192) swizzled as they are.
    assert gemm_sm90.c_row_bytes(176) == 16 * 23 and gemm_sm90.c_row_bytes(192) == 16 * 24
    assert gemm_sm90.c_row_bytes(256) == 512 and gemm_sm90.c_row_bytes(208) == 16 * 27


def test_only_pingpong_consumers_store_c_themselves():
    """The cooperative direct-C configs (a fourth stage at 224-256 wide) were never picked and are
    gone: every direct-C config is ping-pong, and the removed names are the retired ones."""
    assert all(c.pingpong for c in gemm_sm90.CONFIGS.values() if c.direct_c)
    assert set(gemm_sm90.RETIRED_CONFIGS) == {f"128x{bn}x64{c}d" for bn in (224, 240, 256) for c in ("", "c2")}
    assert not set(gemm_sm90.RETIRED_CONFIGS) & set(gemm_sm90.CONFIGS)


def test_pingpong_direct_c_configs_take_a_fifth_stage():
    """At 168 and 176 wide the per-warp buffers leave room for the fifth stage the C tile took."""
    from fo_lib.gemm.sm90.configs import PINGPONG_DIRECT_WIDTHS
    assert PINGPONG_DIRECT_WIDTHS == (168, 176)
    for bn in PINGPONG_DIRECT_WIDTHS:
        d, pp = gemm_sm90.CONFIGS[f"128x{bn}x64pd"], gemm_sm90.CONFIGS[f"128x{bn}x64p"]
        assert d.pingpong and d.direct_c and d.cluster == 1 and d.BN == pp.BN == bn
        assert (pp.stages, d.stages) == (4, 5) and d.smem_bytes <= MAX_SMEM
        assert replace(pp, stages=5).smem_bytes > MAX_SMEM
        assert d.tile_name == pp.tile_name.replace("_s4", "_s5") + "_dc"


def test_every_config_is_a_candidate_and_the_shipped_table_picks_among_them(monkeypatch):
    """The picker weighs every config (one it never picks is not compiled); the ping-pong direct-C
    ones (stores under the other warpgroup's MMAs) among them; the shipped H200 table, recorded with
    the cooperative direct-C configs, still reads and never yields one."""
    from pathlib import Path

    from fo_lib.gemm import tile_table
    C = gemm_sm90.CONFIGS
    assert set(C) == set(gemm_sm90.CANDIDATES)  # every config is recorded in the table
    pool = gemm_sm90.candidate_pool()
    assert set(pool) == set(C)
    assert {n for n, c in pool.items() if c.direct_c} == {f"128x{bn}x64pd" for bn in gemm_sm90.PINGPONG_DIRECT_WIDTHS}
    assert all(c.pingpong for c in pool.values() if c.direct_c)
    table = Path(__file__).resolve().parents[1] / "data/h200/gemm_sm90_tiles.csv"
    monkeypatch.setenv("FO_SM90_TILES", str(table))
    loaded = gemm_sm90.load_table(table)
    for M, N, K in ((512, 8448, 16384), (2048, 4096, 7168), (4096, 6144, 4096), (1100, 1792, 5120)):
        assert not any(c.direct_c and not c.pingpong
                       for _, c in tile_table.ranked(loaded, gemm_sm90.candidate_pool(), M, N, K, 132, MAX_SMEM))
        picked = gemm_sm90.default_config(M, N, K, 132)
        assert not picked.direct_c or picked.pingpong


@pytest.mark.parametrize("cname", list(VARIANTS))
def test_k_loops_build_their_descriptors_on_the_uniform_datapath(cname, nvrtc):
    """The consumers' k-loop (SASS, nvdisasm of the test extra): 4 HGMMAs per k-block (8 in ping-pong:
    two halves) and no R2UR: ptxas proved the tile loop warp-uniform and steps the wgmma descriptors
    on the uniform datapath. A branch only one lane takes in that loop (a lone thread's spin on a
    stream-K flag did) moves every k-block's descriptors through vector registers (docs/decisions.md, "The k-loop steps its wgmma descriptors on the uniform datapath").
    The one exception: ping-pong with a stream-K tail compiled in, whose warpgroup index stays
    unshuffled (shuffled, the tail's values and the loop's overflow the uniform registers: spills)."""
    from script_loader import load_script
    rep = load_script("scripts/profile/sass_report.py")
    disasm = rep.find_nvdisasm(None)
    assert disasm, "no nvdisasm: the test extra installs the nvidia-cuda-nvdisasm wheel"
    cfg = VARIANTS[cname]
    n = rep.sm90_counts(cfg, "plain", "bf16", disasm)
    assert n["HGMMA"] == (8 if cfg.pingpong else 4) and n["spill"] == 0
    if not (cfg.pingpong and cfg.stream_k):
        assert n["R2UR"] == 0, f"{cname}: {n['R2UR']} R2UR in a k-block loop of {n['loop']} instructions"


def test_planning_at_another_idle_tile_cost_drops_memoized_launches_and_restores_the_cost():
    """Memoized launches keep their stream-K plan (their keys hold no cost), so the block that plans at
    another cost drops them going in and out, and puts the cost back even when the block raises."""
    coop = replace(gemm_sm90.CONFIGS["128x256x64"].with_raster("row", 8), stream_k=True)
    default = stream_k_tail.IDLE_WARPGROUP_TILE_COST
    sm90_launch.SM90._memo.put(("planned before",), object())
    with pytest.raises(KeyError):
        with gemm_sm90.idle_warpgroup_tile_cost(0.6):
            assert sm90_launch.SM90._memo.get(("planned before",)) is None
            assert gemm_sm90.stream_k_schedule(coop, 5000, 7168, 8192, 132)[2] is not None
            sm90_launch.SM90._memo.put(("planned at 0.6",), object())
            raise KeyError("the block fails")
    assert stream_k_tail.IDLE_WARPGROUP_TILE_COST == default
    assert sm90_launch.SM90._memo.get(("planned at 0.6",)) is None
    assert gemm_sm90.stream_k_schedule(coop, 5000, 7168, 8192, 132) == (64, 2, None)


def test_a_short_last_tile_row_gets_stream_k_runs_weighed_by_its_idle_warpgroup(monkeypatch):
    """M = 5000 leaves 8 rows in the last row of 128 x 256 tiles: where its tiles cost less
    (IDLE_WARPGROUP_TILE_COST 0.6: the second warpgroup has no rows), the runs of unequal length
    finish sooner than the split tail; ping-pong (no idle warpgroup), 65+ rows, clusters and configs
    without a tail keep their plans; at the measured cost (1) every config keeps its plan."""
    from fo_lib.gemm.stream_k import last_row_costs, stream_k_finish, stream_k_plan
    coop = replace(gemm_sm90.CONFIGS["128x256x64"].with_raster("row", 8), stream_k=True)
    assert gemm_sm90.stream_k_schedule(coop, 5000, 7168, 8192, 132) == (64, 2, None)
    monkeypatch.setattr(stream_k_tail, "IDLE_WARPGROUP_TILE_COST", 0.6)
    sk, split, bounds = gemm_sm90.stream_k_schedule(coop, 5000, 7168, 8192, 132)
    assert (sk, split) == (196, 1) and len(bounds) == 133 and bounds[-1] == 196 * 128
    cost = last_row_costs(40, 28, "row", 8, stream_k_tail.IDLE_WARPGROUP_TILE_COST)
    assert stream_k_finish(1120, 132, 128, cost, 64, 2) == 8.5  # the split tail, 2 parts
    assert stream_k_plan(1120, 132, 128) == (64, 2)
    pp = replace(gemm_sm90.CONFIGS["128x176x64p"].with_raster("row", 8), stream_k=True)
    coop176 = replace(pp, pingpong=False)
    assert gemm_sm90.stream_k_schedule(coop176, 5000, 4224, 8192, 132)[2] is not None  # 40 x 24 tiles
    assert gemm_sm90.stream_k_schedule(pp, 5000, 4224, 8192, 132)[2] is None
    assert gemm_sm90.stream_k_schedule(coop, 5100, 7168, 8192, 132) == (64, 2, None)  # 108 rows in the last
    assert gemm_sm90.stream_k_schedule(replace(coop, stream_k=False), 5000, 7168, 8192, 132) == (0, 0, None)
    c2 = gemm_sm90.CONFIGS["128x256x64c2"].with_raster("row", 8)
    assert gemm_sm90.stream_k_schedule(c2, 5000, 7168, 8192, 132) == (0, 0, None)
