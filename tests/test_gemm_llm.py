"""CPU checks of fo_lib.experiments.gemm_llm (the LLM-shape benchmark and notebook 14): the wave fill
of each tile width, the per-shape ratios of the recorded benchmark, the modes."""
import math

import pytest

from fo_lib.experiments import gemm_llm


def test_the_wave_fill_of_a_width():
    df = gemm_llm.wave_fill([("qwen2.5-32b qkv tp1", 2048, 7168, 5120)], widths=(176, 256))
    big, mid = df[df.BN == 256].iloc[0], df[df.BN == 176].iloc[0]
    assert (big.tiles, big.whole_waves) == (16 * 28, 4) and big.fill == pytest.approx(448 / 528)
    assert (mid.tiles, mid.whole_waves) == (16 * 41, 5) and mid.fill == pytest.approx(656 / 660)
    # CTA time in 128-wide k loops: 4 waves of 256 against 5 of 176.
    assert (big.work, mid.work) == (1024, 880)


def test_every_shape_and_width_once():
    df = gemm_llm.wave_fill()
    assert len(df) == len(gemm_llm.SHAPES) * len(gemm_llm.WIDTHS)
    assert set(gemm_llm.WIDTHS) == {128, 160, 168, 176, 192, 208, 224, 240, 256}
    assert ((df.fill > 0) & (df.fill <= 1)).all()
    assert (df.whole_waves == df.waves.map(math.ceil)).all()


def test_the_recorded_ratios():
    df, meta = gemm_llm.run("replay", "h200")
    r = gemm_llm.ratios(df)
    assert len(r) == len(gemm_llm.SHAPES) == 30
    assert r.tuned.is_monotonic_increasing  # sorted, worst first
    assert set(r.tuned_BN) <= set(gemm_llm.WIDTHS) and set(r.model_BN) <= set(gemm_llm.WIDTHS)
    assert (r.tuned == df.set_index(["M", "N", "K"]).pipe(
        lambda d: d.cublas_ms / d.ours_ms).loc[list(zip(r.M, r.N, r.K))].to_numpy()).all()
    assert meta["gpu"] == "NVIDIA H200"
    assert gemm_llm.width_of("128x176x64c2/row8+sk") == 176


def test_modes_without_a_hopper_gpu(monkeypatch):
    monkeypatch.setattr(gemm_llm.sm90, "is_supported", lambda *a: False)
    monkeypatch.setattr("fo_lib.experiments.common.have_gpu", lambda: True)  # another GPU
    df, _ = gemm_llm.run("auto", "h200")  # replays
    assert len(df) == 30
    with pytest.raises(RuntimeError, match="compute capability 9.0"):
        gemm_llm.run("measure", "h200")
    monkeypatch.setattr("fo_lib.experiments.common.have_gpu", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        gemm_llm.run("measure", "h200")


def test_measure_mode_records_what_it_measured(tmp_path, monkeypatch):
    """The notebook's measure path on a (faked) Hopper GPU: quick runs every third shape at 3 rounds,
    records a CSV with provenance into the measured set and returns what it wrote."""
    from fo_lib.experiments import common
    from fo_lib.gemm import sm90

    monkeypatch.setattr(common, "DATA_DIR", tmp_path)
    monkeypatch.setattr(gemm_llm, "measured_set", lambda quick: "fake-gpu" + ("-quick" if quick else ""))
    monkeypatch.setattr(gemm_llm.sm90, "is_supported", lambda *a: True)
    monkeypatch.setattr(gemm_llm.sm90, "sm_count", lambda *a: 132)
    monkeypatch.setattr(common, "have_gpu", lambda: True)
    seen = []

    def fake_bench(M, N, K, dtype, rounds, inner, sms, seed, cluster=False, control=False):
        assert not control  # quick runs leave the control variants out
        seen.append((M, N, K, rounds, cluster))
        cfg = sm90.CONFIGS["128x256x64"].with_raster("row", 8)
        t = 1e-9 * M * N * K
        return cfg, cfg, cfg, cfg, 1e-3, dict(ours=t, torch=t * 0.99, signal=t, alt=t, guess=t, model=t, twin=t)

    monkeypatch.setattr(gemm_llm, "bench_shape", fake_bench)
    df, meta = gemm_llm.run("measure", "h200", quick=True)
    assert len(df) == len(seen) == len(range(0, len(gemm_llm.SHAPES), 3))
    assert {r for *_, r, _ in seen} == {3} and not any(c for *_, c in seen)
    assert (tmp_path / "fake-gpu-quick" / "gemm_sm90_llm.csv").exists() and meta["kernel"] == "fo_lib.gemm.sm90"
    assert gemm_llm.ratios(df).tuned.to_list() == pytest.approx([0.99] * len(df), rel=1e-3)


def test_control_variants_are_recorded_and_reported(monkeypatch):
    """With ``control`` every row carries the second timings of ours and cuBLAS, and the summary line
    names the shapes whose two timings differ by more than 2 %."""
    import pandas as pd

    from fo_lib.gemm import sm90

    monkeypatch.setattr(gemm_llm.sm90, "sm_count", lambda *a: 132)
    again = {1536: (1.0, 1.0), 4096: (0.93, 1.005)}  # (ours again / ours, cuBLAS again / cuBLAS) by M

    def fake_bench(M, N, K, dtype, rounds, inner, sms, seed, cluster=False, control=False):
        assert control
        cfg = sm90.CONFIGS["128x256x64"].with_raster("row", 8)
        t = 1e-9 * M * N * K
        o, c = again[M]
        return cfg, cfg, cfg, cfg, 1e-3, dict(ours=t, torch=t, signal=t, alt=t, guess=t, model=t,
                                              ours_again=t * o, torch_again=t * c)

    monkeypatch.setattr(gemm_llm, "bench_shape", fake_bench)
    only = [i for i, (_, M, *_) in enumerate(gemm_llm.SHAPES) if M in again][:2]
    df = pd.DataFrame(gemm_llm.measure_rows(3, 3, only=only, control=True))
    assert (df.ours_again_ms / df.ours_ms).round(3).to_list() == [again[M][0] for M in df.M]
    assert (df.cublas_again_ms / df.cublas_ms).round(3).to_list() == [again[M][1] for M in df.M]
    line = gemm_llm.control_line(df)
    assert "ours 0.930 .. 1.000" in line and "cuBLAS 1.000 .. 1.005" in line
    assert "4096 x 6144 x 4096 (ours 0.930, cuBLAS 1.005)" in line and "1536 x" not in line
    assert gemm_llm.summary(df)["control"] is not None
    assert "none" in gemm_llm.control_line(df[df.M == 1536])
    assert gemm_llm.FULL["control"]  # the record's protocol times them


def test_the_signal_is_compared_with_the_pick_in_whole_waves_where_the_pick_has_a_tail():
    """A signal runs whole waves, so where the pick takes a stream-K tail its overhead is against the
    pick without it (``no_sk``), not against the tail's faster time."""
    import pandas as pd

    df = pd.DataFrame(dict(cublas_ms=1.0, ours_ms=[1.0, 0.9, 0.9], no_sk_ms=[1.0, 1.0, 1.0],
                           stream_k_tiles=[0, 100, 100], signal_ms=[1.01, 1.01, 1.01], guess_ms=1.0, model_ms=1.0,
                           alt_ms=1.0, config="a", model_config="a", guess_config="a"))
    assert gemm_llm.summary(df)["signal_pct"] == pytest.approx(1.0)
    # Against the tails' times two of three shapes would read 12 %: the median too.
    assert gemm_llm.summary(df.assign(stream_k_tiles=0))["signal_pct"] == pytest.approx(100 * (1.01 / 0.9 - 1))


def _bench_csv(ratios, config="128x256x64/row8"):
    """A benchmark CSV's columns ab_compare reads, with cuBLAS / ours = ``ratios`` per shape."""
    import pandas as pd

    n = len(ratios)
    ours = [1.0] * n
    return pd.DataFrame(dict(M=[1024 * (i + 1) for i in range(n)], N=[4096] * n, K=[4096] * n, config=[config] * n,
                             ours_ms=ours, cublas_ms=list(ratios), signal_ms=ours, guess_ms=ours, model_ms=ours,
                             model_config=[config] * n, guess_config=[config] * n, alt_ms=ours,
                             stream_k_tiles=[0] * n))


def test_ab_compare_takes_each_trees_median_and_their_ratio():
    runs = [("a", _bench_csv([0.90, 1.00])), ("b", _bench_csv([0.99, 1.00], "128x128x64p/row8")),
            ("a", _bench_csv([0.92, 0.98])), ("b", _bench_csv([0.97, 1.02], "128x128x64p/row8")),
            ("a", _bench_csv([0.91, 0.99])), ("b", _bench_csv([0.98, 1.01], "128x128x64p/row8"))]
    per_run, shapes = gemm_llm.ab_compare(runs)
    assert list(per_run.tree) == ["a", "b"] * 3 and list(per_run.run) == list(range(6))
    assert per_run.worst.tolist() == [0.90, 0.99, 0.92, 0.97, 0.91, 0.98]
    first = shapes.iloc[0]
    assert (first.a, first.b) == (0.91, 0.98) and first.b_over_a == pytest.approx(0.98 / 0.91, abs=1e-4)
    assert (first.config_a, first.config_b) == ("128x256x64/row8", "128x128x64p/row8")
    assert shapes.iloc[1].b_over_a == pytest.approx(1.01 / 0.99, abs=1e-4)


def test_ab_compare_shows_a_tree_whose_runs_picked_differently():
    runs = [("a", _bench_csv([1.0])), ("b", _bench_csv([1.0])), ("a", _bench_csv([1.0], "128x192x64/row8"))]
    _, shapes = gemm_llm.ab_compare(runs)
    assert shapes.iloc[0].config_a == "128x256x64/row8|128x192x64/row8"


def test_ab_compare_needs_two_trees():
    with pytest.raises(ValueError, match="exactly two trees"):
        gemm_llm.ab_compare([("a", _bench_csv([1.0])), ("a", _bench_csv([1.0]))])


def _ab_script():
    from script_loader import load_script
    return load_script("scripts/bench/ab_sm90_llm.py")


def test_the_ab_script_alternates_trees_seeds_by_pair_and_options_to_b_only(tmp_path):
    from pathlib import Path

    ab = _ab_script()
    runs = ab.run_commands(Path("old"), Path("."), pairs=2, rounds=7, out_dir=tmp_path, only=[3, 5],
                           b_options="-DX=1")
    assert [(label, str(tree)) for label, tree, *_ in runs] == [("a", "old"), ("b", "."), ("a", "old"), ("b", ".")]
    for i, (label, tree, cmd, env, csv) in enumerate(runs):
        assert cmd[cmd.index("--seed") + 1] == str(i // 2) and cmd[cmd.index("--rounds") + 1] == "7"
        assert "--no-cluster" in cmd and cmd[-3:] == ["--only", "3", "5"]
        assert csv.parent == tmp_path and cmd[cmd.index("--out") + 1] == str(csv.resolve())
        assert env["FO_NVRTC_OPTIONS"] == ("-DX=1" if label == "b" else "")
        assert env["FO_SM90_AUTOTUNE"] == "0" and env["PYTHONPATH"] == str(tree.resolve())
    tuned = ab.run_commands(Path("old"), Path("."), pairs=1, rounds=7, out_dir=tmp_path, autotune=True)
    assert [env["FO_SM90_AUTOTUNE"] for *_, env, _ in tuned] == ["1", "1"]


def test_the_ab_script_refuses_a_missing_tree_and_an_unknown_macro(tmp_path, capsys):
    from pathlib import Path

    ab = _ab_script()
    repo = Path(__file__).resolve().parents[1]
    with pytest.raises(SystemExit):
        ab.main(["--a", str(tmp_path / "missing"), "--b", str(repo), "--out-dir", str(tmp_path)])
    assert f"{tmp_path / 'missing'} has no scripts/bench/bench_gemm_sm90_llm.py" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ab.main(["--a", str(repo), "--b", str(repo), "--b-options=-DFO_NO_SUCH_SWITCH=1", "--out-dir", str(tmp_path)])
    assert "mentions FO_NO_SUCH_SWITCH" in capsys.readouterr().err
    assert ab.unknown_macros("-DFO_SIGNAL_RELEASE_KTILE=2 -DFO_NO_SUCH_SWITCH -O3", repo) == ["FO_NO_SUCH_SWITCH"]


def test_ab_compare_refuses_runs_over_different_shapes():
    with pytest.raises(ValueError, match="different shapes"):
        gemm_llm.ab_compare([("a", _bench_csv([1.0, 1.0])), ("b", _bench_csv([1.0]))])


def test_a_cluster_twin_only_where_the_tile_has_a_cluster_form():
    from fo_lib.gemm import sm90
    twin = gemm_llm.cluster_twin(sm90.CONFIGS["128x176x64"].with_raster("row", 1))
    assert (twin.cluster, twin.order, twin.swizzle) == (2, "row", 2)
    assert gemm_llm.cluster_twin(sm90.CONFIGS["128x176x64c2"]).cluster == 1
    assert gemm_llm.cluster_twin(sm90.CONFIGS["128x168x64"]) is None  # halves of B need BN % 16
