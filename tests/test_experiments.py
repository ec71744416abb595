"""CPU logic of fo_lib.experiments: mode resolution, candidate selection, the summaries the notebooks
print (on the recorded H200 data, which the repository ships)."""
import numpy as np
import pytest

from fo_lib import experiments as ex
from fo_lib import partition as P
from fo_lib import partition_tuning
from fo_lib.experiments import overlap


def test_resolve_mode():
    assert ex.resolve_mode("replay") == "replay"
    assert ex.resolve_mode("auto", needs_gpu=False) == "measure"
    with pytest.raises(ValueError, match="mode must be"):
        ex.resolve_mode("fast")
    if not ex.have_gpu():
        assert ex.resolve_mode("auto") == "replay"
        with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
            ex.resolve_mode("measure")


def test_candidate_partitions():
    rng = np.random.default_rng(0)
    assert overlap.candidate_partitions(4, (1, 3), rng, 16) == list(P.compositions(4))
    many = overlap.candidate_partitions(16, (2, 14), rng, 12)
    assert len(many) == 12 and len(set(many)) == 12
    assert {(2, 14), P.finest(16), P.no_overlap(16)} <= set(many)
    assert all(sum(c) == 16 for c in many)


def test_recorded_summaries():
    df, meta = overlap.candidates("h200")
    assert meta["gpu"] == "NVIDIA H200"
    stat = overlap.finest_statistic(df)
    acc = overlap.predictor_accuracy(df)
    assert len(stat) == len(acc) == df.groupby(["primitive", "shape"]).ngroups
    assert (acc.chosen_of_best <= 1.0 + 1e-12).all() and (acc.mean_error >= 0).all()
    assert (stat.finest_loss >= -1e-9).all()


def test_overheads_summary_has_paper_and_ours():
    s = ex.overheads.summary("h200")
    assert len(s) == 3 and s.gpu.str.contains("ours").any()


def test_gemm_overheads_read_the_record_and_its_control():
    g, meta = ex.overheads.gemm_overheads("h200")
    assert len(g) == 30 and meta.get("gpu")
    # The record holds the plain kernel timed twice (bench_gemm.py --control): the noise floor.
    assert "control_pct" in g and g.control_pct.abs().max() < 5
    expect = (g.signal / g.ours - 1) * 100
    assert (g.signal_pct - expect).abs().max() < 1e-9


def test_missing_record_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="measure mode"):
        ex.load("h200", "no_such_experiment")


def test_all_to_all_wave_bytes():
    from fo_lib.engine import Routing
    from fo_lib.tiling import TileGrid
    from fo_lib.partition_tuning import all_to_all_wave_bytes

    grid = TileGrid(512, 256, BM=64, BN=64, sm_count=6)
    out_bytes = grid.wave_elements() * 2
    W = 4
    uniform = Routing.from_destinations([np.arange(512) % W] * W)
    np.testing.assert_allclose(all_to_all_wave_bytes(grid, uniform), out_bytes, rtol=1e-9)
    to_self = Routing.from_destinations([np.full(512, r) for r in range(W)])
    assert max(all_to_all_wave_bytes(grid, to_self)) == 1
    skewed = Routing.from_destinations([np.zeros(512, dtype=int)] * W)  # everything to rank 0
    got = np.array(all_to_all_wave_bytes(grid, skewed))
    np.testing.assert_allclose(got, out_bytes * W / (W - 1), atol=1)  # ranks 1..3 send all their rows (rounded)


class _OneProcessLink:
    world_size, rank, link = 2, 0, "emulated"


class _RankLink:
    world_size, rank, link = 4, 0, "nccl"

    def broadcast_object(self, obj):
        return ("from rank 0", obj)

    def max_over_ranks(self, values):
        return [v + 1 for v in values]


def test_rank_agreement_helpers():
    # One process: nothing to agree on; several: rank 0's choice and the slowest rank's time.
    assert overlap._agree(_OneProcessLink(), (1, 2)) == (1, 2)
    assert overlap._agree(_RankLink(), (1, 2)) == ("from rank 0", (1, 2))
    assert partition_tuning.slowest_rank(_OneProcessLink(), {"b": 1.0, "a": 2.0}) == {"b": 1.0, "a": 2.0}
    assert partition_tuning.slowest_rank(_RankLink(), {"b": 1.0, "a": 2.0}) == {"a": 3.0, "b": 2.0}
    assert overlap.link_label(_OneProcessLink()).startswith("emulated")
    assert overlap.link_label(_RankLink()) == "NCCL (4 GPUs)"


def test_sweep_shapes_cover_paper_and_llama():
    shapes = overlap.PAPER_SHAPES
    assert len(shapes["all_reduce"]) == 8 and (3072, 8192, 16384) in shapes["all_reduce"]
    assert {m for m, _, _ in shapes["all_to_all"]} == {512, 1024, 2048, 2560}
    # Llama-3-70B at TP=8: K = hidden/8 (attention out) and intermediate/8 (MLP down), N = hidden.
    assert {k for _, _, k in overlap.LLAMA70B_TP8_SHAPES} == {8192 // 8, 28672 // 8}
    assert overlap.record_name("h200") == "overlap_loopback"


def test_time_breakdown_adds_up_to_the_measured_time():
    from fo_lib.experiments import multi_gpu

    sets = multi_gpu.data_sets()
    if not sets:
        pytest.fail("no recorded multi-GPU data set in data/ (data/h200x2 is committed)")
    tb = multi_gpu.time_breakdown(sets[0])
    assert len(tb) > 0 and (tb.primitive == "all_reduce").any()
    parts = tb.cublas_ms + tb.gemm_gap_ms + tb.sm_share_ms + tb.exposed_ms
    np.testing.assert_allclose(parts, tb.best_graph_ms, rtol=1e-9)
    assert (tb.bound_ms <= tb.reference_ms * 1.05).all()  # the bound is below the sequential time


def test_timeline_plot_draws_every_lane():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from fo_lib.experiments import timeline

    rows = [dict(source="measured", span="gemm", group=-1, start_ms=0.0, end_ms=1.0),
            dict(source="measured", span="group", group=0, start_ms=0.5, end_ms=0.8),
            dict(source="measured", span="group", group=1, start_ms=1.0, end_ms=1.3),
            dict(source="measured", span="post", group=-1, start_ms=1.3, end_ms=1.4),
            dict(source="model", span="gemm", group=0, start_ms=0.0, end_ms=0.5),
            dict(source="model", span="group", group=0, start_ms=0.5, end_ms=0.75)]
    fig, ax = plt.subplots()
    timeline.plot(ax, pd.DataFrame(rows))
    assert len(ax.patches) == len(rows)
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "GEMM (measured)"
    plt.close(fig)
    assert timeline.recorded([]) == []


def test_timeline_summary_reads_the_spans():
    import pandas as pd

    from fo_lib.experiments import timeline

    key = dict(primitive="all_reduce", M=256, N=128, K=64, partition="[1, 1]")
    rows = [dict(source="measured", span="gemm", group=-1, start_ms=0.0, end_ms=1.0),
            dict(source="measured", span="group", group=0, start_ms=0.5, end_ms=0.8),
            dict(source="measured", span="group", group=1, start_ms=1.0, end_ms=1.3),
            dict(source="measured", span="post", group=0, start_ms=1.0, end_ms=1.1),
            dict(source="measured", span="post", group=1, start_ms=1.3, end_ms=1.45),
            dict(source="model", span="gemm", group=0, start_ms=0.0, end_ms=0.5),
            dict(source="model", span="gemm", group=1, start_ms=0.5, end_ms=0.9),
            dict(source="model", span="group", group=0, start_ms=0.5, end_ms=0.75),
            dict(source="model", span="group", group=1, start_ms=0.9, end_ms=1.2)]
    s = timeline.summary(pd.DataFrame([key | r for r in rows])).iloc[0]
    assert (s.groups, s.gemm_end_ms, s.model_gemm_end_ms, s.first_ready_ms, s.model_first_ready_ms) == (2, 1.0, 0.9, 0.5, 0.5)
    assert (s.last_collective_end_ms, s.model_last_collective_end_ms, s.call_ms) == (1.3, 1.2, 1.45)
    assert abs(s.post_tail_ms - 0.15) < 1e-12


def test_tuner_pick_keeps_overlap_only_when_its_check_wins():
    import pandas as pd

    from fo_lib.experiments import multi_gpu

    def rows(check_overlap, tuner_overlaps=True):
        base = dict(primitive="all_reduce", N=1024, K=1024, cublas_ms=1.0, comm_ms=0.5, comm_over_cublas=0.5,
                    cublas_then_comm_ms=1.5, predicted_sequential_ms=1.5, tuner_overlaps=tuner_overlaps,
                    overlap_predicted_ms=1.3, overlap_predicted_graph_ms=1.2, best_ms=1.25, decomp2_ms=2.0,
                    decomp4_ms=2.0, symm_mem_fused_ms=float("nan"), predicted_vs_best=1.0, predicted_vs_best_graph=1.0)
        # Budget 8: predicted best but its NCCL is slower alone; budget 0 holds the fastest reference.
        return [base | dict(M=m, nccl_max_ctas=0, predicted_model_ms=1.4, check_overlap_ms=9.0, check_reference_ms=1.45)
                for m in (1, 2, 3)] + [
            base | dict(M=m, nccl_max_ctas=8, predicted_model_ms=1.1, cublas_then_comm_ms=1.7,
                        check_overlap_ms=c, check_reference_ms=1.7)
            for m, c in ((1, check_overlap), (2, 1.5), (3, 1.3))]

    df = pd.DataFrame(rows(1.3))
    df.loc[(df.M == 3), "tuner_overlaps"] = False  # the model itself falls back: no check can bring overlap back
    picked = multi_gpu.tuner_pick(df).set_index("M")
    assert picked.loc[1, "nccl_max_ctas"] == 8 and picked.loc[1, "tuner_keeps_overlap"]
    assert picked.loc[1, "tuned_checked_ms"] == 1.2 and picked.loc[1, "reference_ms"] == 1.5
    # 1.5 loses to the fastest reference of its shape (1.45 at NCCL's own budget), not only to its budget's 1.7.
    assert not picked.loc[2, "tuner_keeps_overlap"] and picked.loc[2, "tuned_checked_ms"] == 1.5
    assert not picked.loc[3, "tuner_keeps_overlap"] and picked.loc[3, "tuned_checked_speedup"] == 1.0
    assert multi_gpu.bar_summary(picked.reset_index(), mode="checked")["worst_speedup"] == 1.0
    old = multi_gpu.tuner_pick(df.drop(columns=["check_overlap_ms", "check_reference_ms"]))
    assert old.tuned_checked_ms.isna().all() and not old.tuner_keeps_overlap.any()


def test_checked_tuner_also_picks_the_allreduce_layout():
    import pandas as pd

    from fo_lib.experiments import multi_gpu

    base = dict(primitive="all_reduce", N=1024, K=1024, nccl_max_ctas=0, cublas_ms=1.0, comm_ms=0.5,
                comm_over_cublas=0.5, cublas_then_comm_ms=1.5, predicted_model_ms=1.2, predicted_sequential_ms=1.5,
                tuner_overlaps=True, overlap_predicted_ms=1.3, best_ms=1.25, decomp2_ms=2.0, decomp4_ms=2.0,
                symm_mem_fused_ms=float("nan"), predicted_vs_best=1.0, predicted_vs_best_graph=1.0,
                check_reference_ms=1.45)
    df = pd.DataFrame([
        base | dict(M=1, layout="tiles", overlap_predicted_graph_ms=1.2, check_overlap_ms=1.3),
        base | dict(M=1, layout="rows", overlap_predicted_graph_ms=1.1, check_overlap_ms=1.2),
        base | dict(M=2, layout="tiles", overlap_predicted_graph_ms=1.2, check_overlap_ms=1.3),
        base | dict(M=2, layout="rows", overlap_predicted_graph_ms=1.3, check_overlap_ms=1.4, tuner_overlaps=False),
        base | dict(M=3, layout="tiles", overlap_predicted_graph_ms=1.2, check_overlap_ms=1.5),
        base | dict(M=3, layout="rows", overlap_predicted_graph_ms=1.4, check_overlap_ms=1.46)])
    picked = multi_gpu.tuner_pick(df).set_index("M")
    assert len(picked) == 3 and (picked.layout == "tiles").all()  # eager / graph: the default layout
    assert picked.loc[1, "checked_layout"] == "rows" and picked.loc[1, "tuned_checked_ms"] == 1.1
    assert picked.loc[1, "tuned_graph_ms"] == 1.2
    assert picked.loc[2, "checked_layout"] == "tiles" and picked.loc[2, "tuned_checked_ms"] == 1.2
    # Both checks lose to cuBLAS then NCCL (1.45): the fallback.
    assert not picked.loc[3, "tuner_keeps_overlap"] and picked.loc[3, "tuned_checked_ms"] == 1.5


def test_benchmark_routing_is_seeded_by_the_shape_and_routed_profile_counts_its_bytes():
    from fo_lib import gemm
    from fo_lib.profiles import GemmProfile
    from fo_lib.partition_tuning import all_to_all_wave_bytes

    r1, r2 = overlap.benchmark_routing(512, 256, 64, 4), overlap.benchmark_routing(512, 256, 64, 4)
    assert all(np.array_equal(a, b) for a, b in zip(r1.dest, r2.dest)) and len(r1.dest) == 4
    assert not np.array_equal(r1.dest[0], overlap.benchmark_routing(512, 256, 128, 4).dest[0])
    assert set(np.unique(r1.dest[0])) <= set(range(4))
    cfg = gemm.CONFIGS["64x64x32"]
    grid = cfg.grid(512, 256, 4)
    prof = GemmProfile.synthetic(grid.num_waves, 0.1, 1, M=512, N=256, K=64, ctas=4)
    routed = overlap.routed_profile(prof, cfg, 4, r1)
    assert routed.wave_bytes == tuple(all_to_all_wave_bytes(grid, r1)) and routed.wave_ms == prof.wave_ms


def test_recorded_sweep_with_both_layouts_feeds_the_checked_tuner():
    from fo_lib.experiments import multi_gpu

    ds = multi_gpu.data_sets()[0]
    df = multi_gpu.sweep_both_layouts(ds)
    assert set(df.layout) <= {"tiles", "rows"} and (df.layout == "tiles").any()
    picked = multi_gpu.tuner_pick(df)
    assert len(picked) == len(df[df.layout == "tiles"].groupby(["primitive", "M", "N", "K"]))
    assert set(picked.checked_layout) <= {"", "tiles", "rows"}
    fell_back = ~picked.tuner_keeps_overlap
    assert (picked.tuned_checked_ms[fell_back] == picked.reference_ms[fell_back]).all()


def test_copy_engine_comparison_and_record():
    import pandas as pd

    mg = ex.multi_gpu
    base = dict(primitive="all_reduce", M=64, N=64, K=64, comm_over_cublas=0.5, cublas_ms=1.0, comm_ms=0.5)
    summary = pd.DataFrame([
        dict(base, copy_engine=False, nccl_max_ctas=0, cublas_then_comm_ms=1.6, overlap_predicted_graph_ms=1.4),
        dict(base, copy_engine=True, nccl_max_ctas=0, cublas_then_comm_ms=1.5, overlap_predicted_graph_ms=1.2),
        dict(base, copy_engine=False, nccl_max_ctas=8, cublas_then_comm_ms=1.9, overlap_predicted_graph_ms=1.0),
        dict(base, M=128, copy_engine=False, nccl_max_ctas=0, cublas_then_comm_ms=2.0, overlap_predicted_graph_ms=2.0),
    ])
    got = mg.copy_engine_comparison(summary)
    assert len(got) == 1  # the shape without a copy-engine row is left out
    row = got.iloc[0]
    assert (row.nccl_reference_ms, row.copy_engine_reference_ms) == (1.6, 1.5)  # each path's own rounds
    assert row.nccl_graph_ms == 1.4  # NCCL's own CTA budget, not the budget-8 row
    assert np.isclose(row.copy_engine_graph_speedup, 1.25) and np.isclose(row.nccl_graph_speedup, 1.6 / 1.4)
    assert mg.copy_engine_sweep("no-such-set") is None
    rec = mg.copy_engine_sweep("h200x2")  # the recorded sweep: both paths for every AllReduce shape
    assert rec is not None
    ce, meta = rec
    shapes = ce[ce.primitive == "all_reduce"].groupby(["M", "N", "K"]).ngroups
    assert len(mg.copy_engine_comparison(ce)) == shapes > 0 and meta["world_size"] == 2
    from fo_lib.provenance import DATA_DIR
    profiles, curves = overlap.profiles_and_curves(DATA_DIR / "h200x2" / mg.COPY_ENGINE, "overlap_nccl")
    assert {k[0] for k in profiles} == {0, "copy_engine"}
    assert curves[("copy_engine", "all_reduce")].primitive == "all_gather"  # the in-place AllGather's curve


def test_budget_key_of_sweep_rows():
    import pandas as pd

    rows = pd.DataFrame([dict(nccl_max_ctas=8, copy_engine=False), dict(nccl_max_ctas=0, copy_engine=True),
                         dict(nccl_max_ctas=16, copy_engine=float("nan"))])
    assert [overlap.budget_key(r) for r in rows.itertuples()] == [8, "copy_engine", 16]
    assert overlap.budget_key(pd.DataFrame([dict(nccl_max_ctas=4)]).itertuples().__next__()) == 4


def test_tuner_pick_reference_is_the_chosen_rows_own_baseline_on_default_nccl():
    """The reference of a shape is the cuBLAS-then-NCCL time of the chosen row's own rounds when that
    baseline ran on NCCL's default communicator (budget 0, or the copy-engine sweep); a bounded
    budget's baseline ran on its slower NCCL, so such a choice is compared with the default rows'."""
    import pandas as pd

    from fo_lib.experiments import multi_gpu

    base = dict(primitive="all_reduce", N=1024, K=1024, cublas_ms=1.0, comm_ms=0.5, comm_over_cublas=0.5,
                predicted_sequential_ms=1.5, tuner_overlaps=True, overlap_predicted_ms=1.3,
                overlap_predicted_graph_ms=1.2, best_ms=1.25, decomp2_ms=2.0, decomp4_ms=2.0,
                symm_mem_fused_ms=float("nan"), predicted_vs_best=1.0, predicted_vs_best_graph=1.0)
    df = pd.DataFrame([
        base | dict(M=1, nccl_max_ctas=0, copy_engine=False, cublas_then_comm_ms=1.50, predicted_model_ms=1.4),
        base | dict(M=1, nccl_max_ctas=0, copy_engine=True, cublas_then_comm_ms=1.56, predicted_model_ms=1.1),
        base | dict(M=2, nccl_max_ctas=0, copy_engine=False, cublas_then_comm_ms=1.50, predicted_model_ms=1.4),
        base | dict(M=2, nccl_max_ctas=0, copy_engine=True, cublas_then_comm_ms=1.56, predicted_model_ms=1.3),
        base | dict(M=2, nccl_max_ctas=8, copy_engine=False, cublas_then_comm_ms=1.90, predicted_model_ms=1.0)])
    picked = multi_gpu.tuner_pick(df).set_index("M")
    assert picked.loc[1, "copy_engine"] and picked.loc[1, "reference_ms"] == 1.56  # its own rounds
    assert picked.loc[2, "nccl_max_ctas"] == 8 and picked.loc[2, "reference_ms"] == 1.50  # default NCCL's
    assert np.isclose(picked.loc[1, "tuned_graph_speedup"], 1.56 / 1.2)


def test_resolve_mode_with_a_machine_requirement():
    assert ex.resolve_mode("auto", available=lambda: False) == "replay"
    assert ex.resolve_mode("auto", available=lambda: True) == "measure"
    assert ex.resolve_mode("replay", available=lambda: pytest.fail("asked in replay mode")) == "replay"
    with pytest.raises(RuntimeError, match="needs 2\\+ GPUs for NCCL \\(found 1\\); use mode='replay'"):
        ex.resolve_mode("measure", available=lambda: False, need="2+ GPUs for NCCL (found 1)")


def test_multi_gpu_refuses_to_measure_without_two_gpus(monkeypatch):
    from fo_lib.experiments import multi_gpu
    monkeypatch.setattr(multi_gpu, "gpu_count", lambda: 1)
    with pytest.raises(RuntimeError, match="needs 2\\+ GPUs for NCCL \\(found 1\\)"):
        multi_gpu.run("measure")
    assert multi_gpu.run("auto") == multi_gpu.data_sets()[0]  # the recorded sweep
