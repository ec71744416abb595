"""Wave pattern: per-tile completion times of one persistent GEMM vs the tiling model's waves.

Paper (Fig. 3): M=2048, N=K=8192 on an RTX 4090 = 512 tiles / 128 SMs = 4 waves; a wave's tiles
finish within 5% of a wave's duration. Here: the probe epilogue's ``%globaltimer`` stamps on the H200.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .common import load, resolve_mode

NAME = "wave_pattern"


def measure(M=2048, N=8192, K=8192, configs=(("256x128x64", "row", 1), ("256x128x64", "row", 8)),
            repeats=3) -> pd.DataFrame:
    import torch

    from .. import gemm

    sms = gemm.sm_count()
    a = torch.randn(M, K, device="cuda").bfloat16()
    b = torch.randn(N, K, device="cuda").bfloat16()
    frames = []
    for name, order, swizzle in configs:
        cfg = gemm.CONFIGS[name].with_raster(order, swizzle)
        grid = cfg.grid(M, N, sms)
        for rep in range(repeats + 1):
            _, probe = gemm.gemm_nt_probe(a, b, config=cfg, ctas=sms)
            torch.cuda.synchronize()
            if rep == 0:
                continue  # first launch pays for loading
            p = probe.cpu().numpy()
            t0 = p[:, 0].min()
            frames.append(pd.DataFrame(dict(
                config=name, order=order, swizzle=swizzle, repeat=rep, M=M, N=N, K=K, sms=sms,
                tile=np.arange(grid.num_tiles), schedule_index=grid.schedule_index,
                model_wave=grid.tile_wave, start_us=(p[:, 0] - t0) / 1e3, end_us=(p[:, 1] - t0) / 1e3,
                smid=p[:, 2], cta=p[:, 3])))
    return pd.concat(frames, ignore_index=True)


def run(mode="auto", data_set="h200", quick=False, **kw) -> tuple[pd.DataFrame, dict]:
    """Measure (and record into ``data/<gpu>[-quick]/``, see :func:`measured_set`) or replay."""
    if resolve_mode(mode) == "measure":
        from .common import measured_set, record
        if quick:
            kw.setdefault("repeats", 1)
        df = measure(**kw)
        record(df, NAME, measured_set(quick), link="none")
        return load(measured_set(quick), NAME)
    return load(data_set, NAME)


def detect_waves(df: pd.DataFrame) -> pd.DataFrame:
    """Per (config, repeat): waves detected from completion order (tiles sorted by end time, cut into
    runs of ``sms``) vs the model's waves; and the spread of end times inside each wave."""
    rows = []
    for (cfg, order, sw, rep), g in df.groupby(["config", "order", "swizzle", "repeat"]):
        sms = int(g.sms.iloc[0])
        g = g.sort_values("end_us")
        detected = np.arange(len(g)) // sms
        wave_ms = g.groupby("model_wave").end_us.max().diff().fillna(g.groupby("model_wave").end_us.max().iloc[0])
        spread = g.groupby("model_wave").end_us.agg(lambda x: x.max() - x.min())
        rows.append(dict(config=cfg, order=order, swizzle=sw, repeat=rep, waves=int(g.model_wave.max()) + 1,
                         agreement=float((detected == g.model_wave.to_numpy()).mean()),
                         spread_over_wave=float((spread / wave_ms).iloc[:-1].max()) if len(spread) > 1 else 0.0))
    return pd.DataFrame(rows)


def draw(runs):
    """One row of panels per recorded GPU (``runs``: ``(df, meta)`` pairs, this run's first), one column
    per (config, swizzle) any of them recorded: when each tile of the first repeat ends, coloured by
    the wave the model assigns it."""
    import matplotlib.pyplot as plt

    from .common import gpu_name

    firsts = [df[df.repeat == df.repeat.min()] for df, _ in runs]
    keys = sorted({k for f in firsts for k in f.groupby(["config", "swizzle"]).groups})
    fig, axes = plt.subplots(len(runs), len(keys), figsize=(6 * len(keys), 4.3 * len(runs)), sharey="row",
                             squeeze=False, layout="constrained")
    fig.suptitle("When each output tile ends, coloured by the wave the model assigns it")
    for row, first, (_, meta) in zip(axes, firsts, runs):
        on = f"\non {gpu_name(meta)}" if len(runs) > 1 else ""  # a line of its own: a title is a panel wide
        groups = dict(list(first.groupby(["config", "swizzle"])))
        for ax, (cfg, sw) in zip(row, keys):
            ax.set_title(f"{cfg} tiles, row raster, swizzle {sw}{on}")
            if (cfg, sw) not in groups:
                ax.set_axis_off()
                ax.text(0.5, 0.5, "not recorded on this GPU", ha="center", va="center", transform=ax.transAxes)
                continue
            for w, gw in groups[(cfg, sw)].groupby("model_wave"):
                ax.scatter(gw.schedule_index, gw.end_us, s=3, label=f"wave {w}")
            ax.set(xlabel="schedule index (tile order)", ylabel="tile end (µs after the first tile's start)")
            ax.legend(markerscale=4, fontsize=7, title="the model's wave", title_fontsize=7)
    return fig
