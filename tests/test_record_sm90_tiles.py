"""The recorder of the Hopper tile table and the scripts around it on the CPU, GPU timings faked: the
grids, sessions and rows of fo_lib.calibration.sm90_tiles (scripts/bench/record_sm90_tiles.py runs
it), the table it writes read back by the picker, and scripts/bench/bench_gemm_sm90_llm.py on the
LLM shapes."""
import pytest

from fo_lib.calibration import sm90_tiles
from fo_lib.gemm import sm90, tile_table
from sm90_tile_tables import write_table as _table


def _script(name):
    from script_loader import load_script
    return load_script(f"scripts/bench/{name}.py")


@pytest.mark.parametrize("sms", [132, 114, 78])
def test_the_recording_grids_are_whole_waves_of_every_candidate(sms):
    rec = sm90_tiles
    grids = rec.grids(sms)
    measured = [name for *_, names in grids for name in names]
    # Every candidate once per aspect, on whole waves of its own tiles.
    assert sorted(measured) == sorted(list(rec.candidates(sms)) * 3)
    for M, N, names in grids:
        for name in names:
            cfg = sm90.CONFIGS[name]
            assert M % cfg.BM == 0 and N % cfg.BN == 0 and (M // cfg.BM) * (N // cfg.BN) % sms == 0
    bases = [(M, N) for M, N, names in grids if "128x256x64" in names]
    area = bases[0][0] * bases[0][1]
    for M, N, names in grids:  # 128 x 128 shares the big tile's grid; the others about its area
        assert "128x128x64" in names or "128x256x64" not in names
        assert all(abs(m * n / area - 1) < 0.07 for m, n in bases)
        assert abs(M * N / area - 1) < 0.07, (M, N, names)
    if sms == 132:
        assert bases == [(1024, 33792), (4096, 8448), (16896, 2048)]  # 8 x 132, 32 x 33, 132 x 8 big tiles
        assert (4608, 7744, ("128x176x64", "128x176x64c2", "128x176x64p", "128x176x64c2p", "128x176x64pd")) in grids  # 36 x 44 tiles: 12 waves


def test_the_recorder_writes_a_table_the_picker_reads(data_dir):
    rec = sm90_tiles
    rows = []
    for M, N, names in rec.grids(132):
        for K in rec.KS:
            # Synthetic GEMM times: per tile area, every width but 256 4 % slower (a wave of the
            # small tile, twice as many waves, takes 0.52 of a wave of the big one); col order 2 %
            # slower; clusters 3 % slower (never taken here).
            med = {}
            for n in names:
                c = sm90.CONFIGS[n]
                waves = (M // c.BM) * (N // c.BN) // 132
                for o, s in rec.rasters(c):
                    med[rec.variant(n, o, s)] = (waves * c.BN / 256 * (1.0 if c.BN == 256 else 1.04)
                                                 * (1.02 if o == "col" else 1.0) * (1.03 if c.cluster > 1 else 1.0)
                                                 * K / 4096 / 8)
            med["torch"] = 1.0
            rows += rec.table_rows(M, N, K, 132, med, 12, 3, names)
    per_grid = sum(len(rec.rasters(c)) for c in rec.candidates().values())
    # 128 and 256 wide (cooperative) and 128 wide ping-pong, alone and in clusters: every raster; the
    # mid widths and 176 / 192 ping-pong: three rasters alone, two in clusters; the odd widths
    # (cooperative and ping-pong, no clusters) and the ping-pong direct-C tiles: three rasters.
    mids = len(sm90.MID_WIDTHS) + 2
    odd = 2 * len(sm90.ODD_WIDTHS) + len(sm90.PINGPONG_DIRECT_WIDTHS)
    assert per_grid == 3 * len(rec.RASTERS) + 3 * len(rec.CLUSTER_RASTERS) + mids * (
        len(rec.MID_RASTERS) + len(rec.MID_CLUSTER_RASTERS)) + odd * len(rec.MID_RASTERS)
    assert len(rows) == 3 * len(rec.KS) * per_grid
    _table(data_dir, rows)
    cfg = sm90.default_config(4096, 4096, 4096, 132)
    assert (cfg.BN, cfg.order, cfg.swizzle) == (256, "row", 8)  # 4 waves x 1 against 8 x 0.52; all rasters tie
    assert sm90.predict_ms(cfg, 4096, 4096, 4096, 132) == pytest.approx(4 / 8)
    # 2 waves of 128 x 192 (0.78 each) tie 3 of 128 x 128 (0.52) and beat 2 of 128 x 256: the bigger of the tied.
    assert sm90.default_config(128 * 132, 384, 4096, 132).BN == 192


def test_the_llm_shapes_meet_the_issue():
    from fo_lib.experiments.gemm_llm import SHAPES as shapes
    assert len(shapes) >= 24 and len({s[1:] for s in shapes}) == len(shapes)
    assert min(m for _, m, _, _ in shapes) >= 1024 and max(m for _, m, _, _ in shapes) == 16384
    assert sum(m % 128 != 0 for _, m, _, _ in shapes) >= 4
    assert all(k % 8 == 0 for *_, k in shapes)
    assert {o.split()[0] for o, *_ in shapes} >= {"llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen2.5-7b"}
    assert {o.split()[-1] for o, *_ in shapes} == {"tp1", "tp2", "tp4", "tp8"}


def test_record_then_benchmark_end_to_end_with_fake_timings(data_dir, monkeypatch, tmp_path, capsys):
    """The two GPU scripts' own logic (rows, table, provenance, summary) with the timing faked: the
    table one writes is the table the other picks from."""
    import json

    import pandas as pd

    from fo_lib.experiments import gemm_llm

    rec, script, llm = sm90_tiles, _script("record_sm90_tiles"), _script("bench_gemm_sm90_llm")
    monkeypatch.setattr(sm90, "is_supported", lambda *a: True)
    monkeypatch.setattr(sm90, "sm_count", lambda *a: 132)

    measured_groups = []

    def fake_measure(group, K, dtype, rounds, inner, sm_count, seed):
        measured_groups.append([(M, N) for M, N, _ in group])
        out = {}
        for M, N, names in group:
            med = {rec.variant(n, o, s): (M // c.BM) * (N // c.BN) / 132 * c.BN / 256
                   * (1.0 if c.BN in (128, 256) else 1.06) * (1.0 if c.BN == 256 else 1.02) * (1 + 0.01 * s)
                   * (1.05 if c.cluster > 1 else 1) * K / 4096
                   for n in names for c in [sm90.CONFIGS[n]] for o, s in rec.rasters(c)}
            out[(M, N)] = dict(med, torch=1.0)
        return out

    monkeypatch.setattr(rec, "measure", fake_measure)
    table = tmp_path / "out" / "gemm_sm90_tiles.csv"
    script.main(["--out", str(table), "--K", "1024", "4096"])
    assert len(pd.read_csv(table)) == 3 * 2 * sum(len(rec.rasters(c)) for c in rec.candidates().values())
    assert json.loads(table.with_suffix(".meta.json").read_text())["waves"] == rec.WAVES
    # One timing session per aspect and K, holding every grid of that aspect.
    assert len(measured_groups) == len(rec.ASPECTS) * 2
    assert sorted(g for group in measured_groups[::2] for g in group) == sorted((M, N) for M, N, _ in rec.grids(132))

    def fake_bench(M, N, K, dtype, rounds, inner, sms, seed, cluster=False, control=False):
        cfg = sm90.default_config(M, N, K, sms)
        alt, guess = gemm_llm.alt_config(cfg, M, N, K, sms), sm90.guess_config(M, N, K, sms)
        t = sm90.predict_ms(cfg, M, N, K, sms)
        again = dict(ours_again=t * 1.01, torch_again=t) if control else {}
        return cfg, cfg, alt, guess, 1e-3, dict(ours=t, torch=t, signal=t * 1.004, alt=t * 1.1, guess=t * 1.05,
                                                no_sk=t * 1.2, model=t, **again)

    monkeypatch.setenv(tile_table.ENV_VAR, "guess")  # restored after the test; main overrides it
    monkeypatch.setattr(gemm_llm, "bench_shape", fake_bench)
    out = tmp_path / "llm.csv"
    llm.main(["--out", str(out), "--tiles", str(table), "--no-cluster"])
    df = pd.read_csv(out)
    assert len(df) == len(gemm_llm.SHAPES)
    assert set(df.columns) >= {"M", "N", "K", "ours_ms", "cublas_ms", "signal_ms", "config"}
    assert (df.config.str.startswith("128x128x64") | df.config.str.startswith("128x256x64")).all()
    assert json.loads(out.with_suffix(".meta.json").read_text())["tiles_table"] == str(table)
    printed = capsys.readouterr().out
    assert "geomean 1.000, median 1.000, worst 1.000" in printed and "signal vs plain median +0.40%" in printed
    # the control variants by default: ours timed again 1 % slower, inside the 2 % it names shapes beyond
    assert "control, the same calls again in graphs of their own: ours 1.010 .. 1.010" in printed
    assert "apart by more than 2%: none" in printed and (df.ours_again_ms > df.ours_ms).all()
    sk = df.stream_k_tiles > 0
    assert sk.any() and df.config[sk].str.endswith("+sk").all() and "whole waves / stream-K geomean 1.200" in printed


def test_measure_times_each_grid_on_its_own_operands_in_one_session(monkeypatch):
    """The recorder's ``measure`` (GPU calls stubbed): one interleaved session for a whole group, each
    variant running its own config and raster on its own grid's operands, torch once per grid."""
    import torch

    from fo_lib import testing
    from fo_lib.experiments import kernel_bench

    rec = sm90_tiles
    group = rec.aspect_grids(132, rec.WAVES, 1.0)
    sets_of = {}

    def fake_sets(M, N, K, dtype):
        sets_of[(M, N)] = [(torch.randn(4, 8), torch.randn(6, 8), torch.empty(4, 6)) for _ in range(2)]
        return sets_of[(M, N)]

    calls = []

    def fake_gemm(a, b, out=None, config=None, ctas=None):
        calls.append((id(a), config, ctas))
        return torch.matmul(a, b.T)

    sessions = []

    def fake_bench(fns, **kw):
        sessions.append((list(fns), kw))
        out = {}
        for key, fn in fns.items():
            del calls[:]
            fn(0)
            out[key] = [float(len(out))]
            if key[2] == "torch":
                assert not calls
            else:
                name, raster = key[2].split("/")
                (a_id, cfg, ctas), = calls
                assert a_id == id(sets_of[key[:2]][0][0]) and ctas == 132
                assert cfg == sm90.CONFIGS[name].with_raster(raster[:3], int(raster[3:]))
        return out

    monkeypatch.setattr(kernel_bench, "input_sets", fake_sets)
    monkeypatch.setattr(sm90, "gemm_nt", fake_gemm)
    monkeypatch.setattr(testing, "bench_interleaved", fake_bench)
    med = rec.measure(group, 4096, torch.bfloat16, 3, 1, 132, 0)
    assert len(sessions) == 1 and sessions[0][1]["order"] == "shuffle" and sessions[0][1]["graph"]
    assert set(med) == {(M, N) for M, N, _ in group}
    for M, N, names in group:
        want = {"torch"} | {rec.variant(n, o, s) for n in names for o, s in rec.rasters(sm90.CONFIGS[n])}
        assert set(med[(M, N)]) == want
    # Another aspect draws other orders.
    other = rec.aspect_grids(132, rec.WAVES, 16.0)
    rec.measure(other, 4096, torch.bfloat16, 3, 1, 132, 0)
    assert sessions[0][1]["seed"] != sessions[1][1]["seed"]
