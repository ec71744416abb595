"""Fig. 14 (fo_lib.experiments.ablation) without a GPU: equal-size groups cover the waves, the
misconfigured wave size's profile and group boundaries on hand-computed cases, a misgrouped plan
that runs correctly through the CPU engine, and the summary and figure on synthetic frames."""
import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

from fo_lib import experiments as ex
from fo_lib import gemm
from fo_lib.comm.cpu_loopback import CpuLoopbackCommunicator
from fo_lib.experiments import ablation as ab
from fo_lib.gemm import sm90
from fo_lib.profiles import GemmProfile
from fo_lib.testing import calc_diff

matplotlib.use("Agg")  # headless: plot() imports pyplot only when it draws


@pytest.mark.parametrize("T", range(1, 21))
def test_equal_groups_cover_the_waves_exactly(T):
    for n in range(1, T + 1):
        part = ab.equal_groups(T, n)
        assert sum(part) == T and all(p == n for p in part[:-1]) and 0 < part[-1] <= n
    assert ab.equal_groups(8, 3) == (3, 3, 2) and ab.equal_groups(8, 8) == (8,)
    with pytest.raises(ValueError):
        ab.equal_groups(T, T + 1)


def test_egs_sizes_full_and_quick():
    assert ab.egs_sizes(5) == [1, 2, 3, 4, 5]
    assert ab.egs_sizes(16, quick=True) == [1, 2, 3, 4, 8, 16]
    assert ab.egs_sizes(2, quick=True) == [1, 2]
    # every size gives its own partition, so none is timed twice
    assert len({ab.equal_groups(16, n) for n in ab.egs_sizes(16)}) == 16


def _h200_grid(M=8192, N=8192, K=16384):
    cfg = sm90.default_config(M, N, K, 132)
    return cfg.grid(M, N, 128)  # 132 SMs, 4 left to the link


def test_misconfigured_profile_sees_fewer_larger_waves(monkeypatch):
    monkeypatch.setenv("FO_SM90_TILES", "guess")  # the table-free pick, even on a GPU with a tile table
    grid = _h200_grid()  # 2048 tiles of 128x256, 128 per wave: 16 waves
    assert grid.num_tiles == 2048 and grid.num_waves == 16
    tile_bytes = 128 * 256 * 2
    prof = GemmProfile.synthetic(16, 0.2, 128 * tile_bytes, M=8192, N=8192, K=16384, ctas=128)
    mis, believed = ab.misconfigured_profile(prof, grid, 20)
    # 148 tiles per believed wave: ceil(2048 / 148) = 14 waves, the last with 2048 - 13 * 148 = 124 tiles
    assert believed.ctas == 148 and mis.num_waves == 14 == believed.num_waves
    assert mis.wave_bytes == (148 * tile_bytes,) * 13 + (124 * tile_bytes,)
    assert sum(mis.wave_bytes) == sum(prof.wave_bytes)
    assert mis.wave_ms == pytest.approx((16 * 0.2 / 14,) * 14) and mis.total_ms == pytest.approx(prof.total_ms)
    assert grid.ctas == 128  # the real grid is untouched


def test_misconfigured_groups_cut_every_believed_wave():
    # 2048 tiles in believed waves of 148: groups (1, 4, 9) end at tiles 148, 740 and 2048
    assert ab.misconfigured_groups(2048, 148, (1, 4, 9)) == [148, 592, 1308]
    # a cut inside real wave 1 (tiles 128..255): the first group waits for that whole wave
    assert ab.misconfigured_groups(2048, 148, (14,)) == [2048]
    with pytest.raises(ValueError):
        ab.misconfigured_groups(2048, 148, (1, 4))


def _inputs(M, N, K, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=gen).bfloat16(), torch.randn(N, K, generator=gen).bfloat16()


@pytest.mark.parametrize("primitive", ["all_reduce", "reduce_scatter"])
def test_misgrouped_plan_runs_its_tile_groups_correctly_on_the_cpu(primitive):
    W, M, N, K = 2, 512, 256, 64
    comm = CpuLoopbackCommunicator(W)
    cfg = gemm.CONFIGS["64x64x32"]  # 8 x 4 = 32 tiles on 4 CTAs: 8 real waves of 4 tiles
    plan = ab.MisgroupedPlan(primitive, M, N, K, comm, device="cpu", config=cfg, sm_count=4,
                             group_wave_tiles=5, partition=(2, 2, 3))  # believed: 7 waves of 5 tiles
    assert plan.ctas == 4 and plan.grid.ctas == 5 and plan.grid.num_waves == 7
    assert plan.group_tiles == ab.misconfigured_groups(32, 5, (2, 2, 3)) == [10, 10, 12]
    a, b = _inputs(M, N, K)
    C = a.double() @ b.double().T
    got = plan.run(a, b)
    want = W * C if primitive == "all_reduce" else W * C[torch.from_numpy(plan.owned_rows)]
    assert calc_diff(got.double(), want) < 1e-2


def _frame():
    """Two shapes' variants as :func:`ablation.measure` returns them (made-up times)."""
    rows = []
    for M, T, tuned, times in ((4096, 8, "[1, 2, 5]", {1: 3.2, 2: 3.1, 8: 3.9}),
                               (8192, 16, "[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]", {1: 5.0, 2: 5.2, 16: 7.0})):
        base = dict(primitive="all_reduce", M=M, N=8192, K=16384, world=2, link="emulated (loopback, copy engine)",
                    waves=T, extra_tiles=20)
        rows.append(base | dict(variant="tuned", egs=0, partition=tuned, groups_run="[128]", ms=min(times.values()) * 0.98
                                if M == 4096 else 5.0))
        for n, ms in times.items():
            rows.append(base | dict(variant=f"Egs={n}", egs=n, partition=str(list(ab.equal_groups(T, n))),
                                    groups_run="[128]", ms=ms))
        rows.append(base | dict(variant="wave size +20", egs=0, partition="[1, 6]", groups_run="[148, 876]",
                                ms=min(times.values()) * 1.05))
    return ab.normalize(pd.DataFrame(rows).assign(model_ms=lambda d: 0.95 * d.ms))


def test_normalize_divides_by_the_tuned_time_of_the_same_shape():
    df = _frame()
    assert (df[df.variant == "tuned"].relative_to_tuned == 1.0).all()
    row = df[(df.M == 4096) & (df.variant == "Egs=8")].iloc[0]
    assert row.relative_to_tuned == pytest.approx(3.1 * 0.98 / 3.9)
    assert ab.normalize(df).equals(df)  # idempotent


def test_summary_names_the_best_equal_size_and_whether_both_lose():
    s = ab.summary(_frame())
    assert s.index[0].startswith("paper (") and "+20 tiles" in s.iloc[0].verdict
    first, second = s.iloc[1], s.iloc[2]
    assert first["best other Egs"] == 2 and first.verdict == "both lose"
    # the tuned partition of the second shape is Egs=1 itself: the best other is Egs=2
    assert "(= Egs=1)" in second["tuned partition"] and second["best other Egs"] == 2
    assert second.verdict == "both lose"


def test_a_variant_within_one_percent_of_the_tuned_partition_ties():
    df = _frame()
    mis = df.variant.str.startswith("wave size") & (df.M == 4096)
    df.loc[mis, "ms"] = df[(df.M == 4096) & (df.variant == "tuned")].ms.iloc[0] * 1.005
    first = ab.summary(ab.normalize(df)).iloc[1]
    assert first.verdict == "misconfigured ties"
    assert ab._outcome(1.02) == "wins" and ab._outcome(0.98) == "loses" and ab._outcome(0.995) == "ties"


def test_plot_draws_a_panel_per_shape_and_the_no_data_figure(tmp_path):
    fig = ab.plot(_frame(), {"gpu": "synthetic", "link": "emulated", "world_size": 2})
    assert len(fig.axes) == 2
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert len(heights) == 5 and heights[-1] == 1.0  # Egs 1, 2, 8, +20, tuned
    assert any("emulated link" in t.get_text() for t in fig.texts)
    assert all(p.stat().st_size > 1000 for p in ex.save(fig, "ablation_test", tmp_path))
    df, meta = ab.load("no-such-data-set")
    none = ab.plot(df, meta)
    assert any("no recorded data yet" in t.get_text() for ax in none.axes for t in ax.texts)
    assert np.isfinite(_frame().relative_to_tuned).all()
