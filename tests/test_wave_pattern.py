"""Fig. 3's numbers and figure (fo_lib.experiments.wave_pattern) on synthetic stamps: tiles that end
wave by wave, and the same record from two GPUs drawn one row each."""
import matplotlib
import numpy as np
import pandas as pd

from fo_lib.experiments import figure_checks, wave_pattern as wp

matplotlib.use("Agg")


def _stamps(sms=4, waves=3, swizzles=(1, 8), jitter=0.0, seed=0):
    """Tiles of ``waves`` full waves on ``sms`` CTAs: tile s in wave s // sms, ending at 10 us a wave."""
    rng = np.random.default_rng(seed)
    n = sms * waves
    frames = []
    for sw in swizzles:
        s = np.arange(n)
        frames.append(pd.DataFrame(dict(
            config="256x128x64", order="row", swizzle=sw, repeat=1, M=512, N=512, K=64, sms=sms,
            tile=s, schedule_index=s, model_wave=s // sms, start_us=(s // sms) * 10.0,
            end_us=(s // sms + 1) * 10.0 - 1 + s % sms * 0.1 + rng.uniform(0, jitter, n), smid=s % sms, cta=s % sms)))
    return pd.concat(frames, ignore_index=True)


def test_tiles_that_end_wave_by_wave_agree_with_the_model():
    w = wp.detect_waves(_stamps())
    assert len(w) == 2 and (w.waves == 3).all() and (w.agreement == 1.0).all()
    # A wave's tiles end within 0.3 us of each other; the first wave lasts until its last tile, 9.3 us.
    assert np.allclose(w.spread_over_wave, 0.3 / 9.3)


def test_a_wave_that_ends_late_lowers_the_agreement():
    df = _stamps()
    late = (df.model_wave == 0) & (df.schedule_index == 0)
    df.loc[late, "end_us"] = 25.0  # the first tile ends in the second wave's time
    w = wp.detect_waves(df)
    # One tile of 12 out of order moves two places (it and the next wave's first): 10 of 12 agree.
    assert np.allclose(w.agreement, 10 / 12) and (w.spread_over_wave > 0.5).all()


def test_two_gpus_draw_one_row_each_named_by_gpu_and_pass_the_figure_checks():
    runs = [(_stamps(), {"gpu": "NVIDIA H200"}), (_stamps(seed=1, jitter=0.5), {"gpu": "NVIDIA H100 80GB HBM3"})]
    fig = wp.draw(runs)
    axes = fig.get_axes()
    assert len(axes) == 4
    titles = [ax.get_title() for ax in axes]
    assert titles[0].endswith("swizzle 1\non H200") and titles[3].endswith("swizzle 8\non H100 80GB HBM3")
    figure_checks.check(fig)
    one = wp.draw(runs[:1])
    assert len(one.get_axes()) == 2 and not one.get_axes()[0].get_title().endswith("H200")


def test_a_gpu_that_recorded_other_swizzles_gets_every_column_and_says_what_it_lacks():
    runs = [(_stamps(swizzles=(1, 8)), {"gpu": "NVIDIA H200"}),
            (_stamps(swizzles=(1, 4, 8)), {"gpu": "NVIDIA H100 80GB HBM3"})]
    fig = wp.draw(runs)
    axes = fig.get_axes()
    assert len(axes) == 6
    titles = [ax.get_title() for ax in axes]
    assert titles[:3] == [f"256x128x64 tiles, row raster, swizzle {s}\non H200" for s in (1, 4, 8)]
    assert [t.get_text() for t in axes[1].texts] == ["not recorded on this GPU"]
    assert titles[4].endswith("swizzle 4\non H100 80GB HBM3") and axes[4].collections  # its points drawn
    figure_checks.check(fig)
