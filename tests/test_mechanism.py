"""The mechanism walkthrough (notebook 00): the counting-table trace of the paper notes' example
(8 tiles, 4 waves on 2 CTAs, groups {W1}, {W2, W3}, {W4}), held against the plan's own tables and a
real CPU run of the plan, the drawing of every step, and Table 1's wave numbers."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from fo_lib import gemm, reorder  # noqa: E402
from fo_lib.engine import OverlapPlan  # noqa: E402
from fo_lib.experiments import mechanism as mech  # noqa: E402
from fo_lib.tiling import TileGrid  # noqa: E402

M, N, K = 128, 256, 32
CONFIG = gemm.CONFIGS["64x64x32"].with_raster("row", 2)  # 2 x 4 tiles of 64 x 64, swizzled bands of 2 rows
PARTITION = (1, 2, 1)


def _plan(W=2, partition=PARTITION):
    return OverlapPlan("all_reduce", M, N, K, mech.RecordingCommunicator(W), device="cpu", sm_count=2, config=CONFIG,
                       partition=partition)


def _inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=gen).bfloat16(), torch.randn(N, K, generator=gen).bfloat16()


def test_the_seed_example_counts_2_0_0_then_2_2_0_then_2_4_0_then_2_4_2():
    trace = mech.counting_trace(_plan().tables)
    assert (trace.grid.num_tiles, trace.grid.num_waves) == (8, 4)
    ends = trace.wave_ends()
    assert ends["counts"].tolist() == [[2, 0, 0], [2, 2, 0], [2, 4, 0], [2, 4, 2]]
    assert ends["fires"].tolist() == [["G1"], [], ["G2"], ["G3"]]
    # Tile by tile: one counter moves by one per step, and a group fires exactly at its target.
    tiles = [s for s in trace.steps if s.kind == "tile"]
    assert [s.counts for s in tiles] == [(1, 0, 0), (2, 0, 0), (2, 1, 0), (2, 2, 0), (2, 3, 0), (2, 4, 0),
                                         (2, 4, 1), (2, 4, 2)]
    assert [s.fired for s in tiles] == [None, 0, None, None, None, 1, None, 2]
    assert trace.steps[0].kind == "start" and trace.steps[-1].kind == "post" and len(trace.steps) == 10
    # Swizzle 2 walks down a band of two tile rows: wave 1 is t0 and t4, not adjacent in row-major C.
    assert [s.tile for s in tiles] == [0, 4, 1, 5, 2, 6, 3, 7]


def test_the_trace_slices_are_the_tables_group_slices_in_fired_order():
    plan = _plan()
    trace = mech.counting_trace(plan.tables, rank=plan.rank)
    assert trace.fired_order() == [0, 1, 2]
    fired = [s.slice for s in trace.steps if s.fired is not None]
    # The trace reads its slices off row_offset; the engine hands group_slices to the collectives.
    assert fired == [tuple(int(v) for v in sl) for sl in plan.tables.group_slices]
    assert fired == [(0, 8192), (8192, 24576), (24576, 32768)]
    assert [sl["send"] for sl in plan.slices] == fired
    # Buffer order: each group's tiles in consecutive slots, in the order they finish.
    assert trace.tile_slot.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]


@pytest.mark.parametrize("partition", [(1, 2, 1), (2, 2), (1, 1, 1, 1), (4,)])
def test_other_partitions_fire_each_group_once_at_its_last_tile(partition):
    trace = mech.counting_trace(_plan(partition=partition).tables)
    assert trace.fired_order() == list(range(len(partition)))
    for s in trace.steps:
        if s.fired is not None:
            g = s.fired
            assert s.counts[g] == trace.group_tiles[g] == 2 * partition[g]
            assert s.tile == int(trace.grid.schedule[2 * sum(partition[:g + 1]) - 1])


def test_a_layout_other_than_tiles_is_refused_and_a_broken_store_table_is_named():
    grid = CONFIG.grid(M, N, 2)
    with pytest.raises(TypeError, match="TileReorder"):
        mech.counting_trace(reorder.gather_reorder(grid, PARTITION, 2, 0))
    tables = reorder.tile_reorder(grid, PARTITION)
    # Swap tiles 4 (G1) and 1 (G2) in the store table: G1 is no longer one contiguous slice.
    bad = tables.row_offset.copy()
    bad[64:128, 0], bad[0:64, 1] = tables.row_offset[0:64, 1], tables.row_offset[64:128, 0]
    from dataclasses import replace
    with pytest.raises(mech.MechanismError, match="group 1's tiles are not contiguous"):
        mech.counting_trace(replace(tables, row_offset=bad))


@pytest.mark.parametrize("W", [1, 2, 3, 4])
def test_the_plans_run_matches_the_trace_and_the_dense_reference(W):
    plan = _plan(W)
    a, b = _inputs(W)
    y, calls = mech.run_recorded(plan, a, b)
    # W identical virtual ranks: the AllReduce sums W copies of A @ B.T.
    want = W * (a.double() @ b.double().T)
    assert torch.linalg.norm(y.double() - want) / torch.linalg.norm(want) < 1e-2
    trace = mech.counting_trace(plan.tables, rank=plan.rank)
    C = (a.float() @ b.float().T).bfloat16().double().numpy()
    report = mech.check_against_run(trace, calls, C, W, y.double().numpy())
    assert report["plan slice"].tolist() == [(0, 8192), (8192, 24576), (24576, 32768)]
    # After G1's collective only G1's slice is filled (and summed): later slots are still zero.
    first = calls[0]["buffer"]
    assert np.any(first[:8192] != 0) and not np.any(first[8192:])


def test_check_against_run_catches_a_wrong_slice_order_and_a_wrong_sum():
    plan = _plan(2)
    a, b = _inputs()
    y, calls = mech.run_recorded(plan, a, b)
    trace = mech.counting_trace(plan.tables)
    C = (a.float() @ b.float().T).bfloat16().double().numpy()
    with pytest.raises(mech.MechanismError, match="group G1"):
        mech.check_against_run(trace, calls[::-1], C, 2)
    with pytest.raises(mech.MechanismError, match="largest buffer difference"):
        mech.check_against_run(trace, calls, C, 4)  # the trace's buffers for 4 ranks, a run of 2
    with pytest.raises(mech.MechanismError, match="collectives"):
        mech.check_against_run(trace, calls[:2], C, 2)
    wrong = y.double().numpy().copy()
    wrong[0, 0] += 1
    with pytest.raises(mech.MechanismError, match="output"):
        mech.check_against_run(trace, calls, C, 2, wrong)


def test_run_recorded_needs_a_recording_communicator():
    from fo_lib.comm.cpu_loopback import CpuLoopbackCommunicator

    plan = OverlapPlan("all_reduce", M, N, K, CpuLoopbackCommunicator(2), device="cpu", sm_count=2, config=CONFIG,
                       partition=PARTITION)
    with pytest.raises(TypeError, match="RecordingCommunicator"):
        mech.run_recorded(plan, *_inputs())


def test_every_step_draws_and_the_small_multiples_have_one_panel_per_step():
    trace = mech.counting_trace(_plan().tables)
    for step in range(len(trace.steps)):
        fig, ax = plt.subplots()
        mech.draw_step(ax, trace, step, world_size=2)
        # One rectangle per tile in C and per buffer slot (two patches each: face and frame), one
        # box per counter.
        assert len(ax.patches) == 2 * 2 * trace.grid.num_tiles + trace.num_groups
        assert ax.get_title(loc="left").startswith(f"step {step}:")
        # The drawing follows the trace: every tile stored so far is coloured, in C and in the buffer.
        faces = [p for p in ax.patches if isinstance(p, Rectangle) and p.fill and p.get_linewidth() == 0]
        coloured = [p for p in faces if to_rgb(p.get_facecolor()) != (1.0, 1.0, 1.0)]
        assert len(coloured) == 2 * len(trace.steps[step].done)
        # Full colour: buffer slots whose group's collective has run, and C once post-reordered.
        st = trace.steps[step]
        full = [p for p in coloured if p.get_alpha() == 1.0]
        restored = trace.grid.num_tiles if st.kind == "post" else 0
        assert len(full) == sum(trace.group_tiles[g] for g in st.reduced) + restored
        plt.close(fig)
    fig = mech.draw_trace(trace, world_size=2)
    titled = [ax.get_title(loc="left") for ax in fig.axes if ax.get_title(loc="left")]
    assert len(titled) == len(trace.steps)
    assert "G2 full: AllReduce on [8192, 24576)" in titled[6]
    plt.close(fig)
    frames = mech.step_images(trace, world_size=2, dpi=40)  # the slider's frames: one PNG per step, all different
    assert len(frames) == len(trace.steps) and all(f.startswith(b"\x89PNG") for f in frames)
    assert len(set(frames)) == len(frames)


def test_decomposition_pays_partial_waves_that_signalling_does_not():
    fig3 = TileGrid.with_ctas(2048, 8192, 128, BM=128, BN=256)  # the paper's Fig. 3 GEMM: 512 tiles, 4 waves
    df = mech.design_comparison(fig3, (1, 1, 1, 1), ks=(2, 3, 8, fig3.num_tiles)).set_index("design")
    assert df.loc["decomposition, k=2", "waves"] == 4        # 8 tile rows x 32 = 256 tiles = 2 full waves each
    assert df.loc["decomposition, k=3", "waves"] == 6        # 6/5/5 tile rows: 192/160/160 tiles, 2 waves each
    assert df.loc["decomposition, k=8", "wave fill"] == 0.5  # 64 tiles per GEMM on 128 CTAs
    per_tile = df.loc["decomposition, one GEMM per tile"]
    assert per_tile["waves"] == 512 and per_tile["tile-wise"] == "yes"
    sig = df.loc["signalling, partition [1, 1, 1, 1]"]
    assert (sig["GEMM launches"], sig["waves"], sig["wave fill"], sig["collectives / call"]) == (1, 4, 1.0, 4)
    assert sig["smallest message (KiB)"] == 128 * 128 * 256 * 2 / 1024  # one wave of 128 tiles
    assert df.loc["fusion (comm per tile in the GEMM)", "smallest message (KiB)"] == 64
    assert list(df.loc[sig.name, ["tile-wise", "interference-free", "communication-agnostic"]]) == ["yes"] * 3
    # Decomposed GEMMs cover exactly the original rows.
    assert sum(g.M for g in mech.decomposed(fig3, 3)) == 2048
    with pytest.raises(ValueError, match="k must be"):
        mech.decomposed(fig3, 17)


def test_the_step_frames_and_their_small_multiples_fit_a_1000_pixel_screen():
    import io

    from PIL import Image

    trace = mech.counting_trace(_plan().tables)
    fig = mech.draw_trace(trace, world_size=2)  # as notebook 00 draws it, saved at 150 dpi
    assert mech.rendered_size(fig)[1] <= mech.FRAME_MAX_PX
    plt.close(fig)
    for frame in mech.step_images(trace, world_size=2):  # the slider's frames, at their own dpi
        assert Image.open(io.BytesIO(frame)).size[1] <= mech.FRAME_MAX_PX
    # The check catches the earlier panel size, whose two rows took 1120 px.
    tall = mech.draw_trace(trace, world_size=2, panel=(3.4, 3.6))
    assert mech.rendered_size(tall)[1] > mech.FRAME_MAX_PX
    plt.close(tall)


def test_the_design_figure_labels_both_axes_of_both_panels():
    fig3 = TileGrid.with_ctas(2048, 8192, 128, BM=128, BN=256)
    designs = mech.design_comparison(fig3, (1, 1, 1, 1), ks=(2, 3, 4, 8, 16, fig3.num_tiles))
    fig = mech.draw_designs(designs, fig3.num_waves)
    waves, message = fig.axes
    assert waves.get_ylabel() == "waves (log scale)" and message.get_ylabel() == "KiB (log scale)"
    assert [b.get_height() for b in waves.patches] == designs.waves.tolist()
    assert f"whole GEMM: {fig3.num_waves}" in waves.get_title()
    assert len(waves.get_xticklabels()) == len(designs)
    plt.close(fig)
