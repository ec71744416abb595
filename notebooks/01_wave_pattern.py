# %% [markdown]
# # 01 · Wave pattern
#
# **Reproduces:** Fig. 3 (the wave pattern of tile completion).
#
# **Paper (Fig. 3, §3.2.3).** A GEMM's output tiles finish in *waves*: M=2048, N=K=8192 on an RTX 4090
# gives 512 tiles on 128 SMs = 4 waves, and the tiles of one wave finish within 5% of a wave's
# duration. FlashOverlap's grouping rests on this regularity.
#
# **Here.** Our persistent GEMM runs tile `s` on CTA `s mod P`, so `fo_lib.tiling` *predicts* each
# tile's wave. The probe epilogue stamps every tile's start and end with `%globaltimer`; we compare
# the completion order with the model, for two raster orders (plain row-major and 8-row swizzle).

# %% tags=["parameters"]
# Parameters (papermill): mode "auto" measures where the needed GPU exists, else replays data/<data_set>/.
mode = "auto"
quick = False
data_set = "h200"
figures_dir = None  # default: <repo>/figures

# %%
# Inline figures in Jupyter (headless under papermill too); ex.save writes figures/.
# %matplotlib inline
import matplotlib.pyplot as plt
import pandas as pd
from fo_lib import experiments as ex
figures_dir = ex.notebook_setup(quick, figures_dir)  # checks quick is a bool; default <repo>/figures

# %%
from fo_lib.experiments import wave_pattern as wp
df, meta = wp.run(mode, data_set, quick)
waves = wp.detect_waves(df)
waves

# %%
# Beside this run, the same record from every other GPU in data/ (the H100's beside the H200's).
runs = [(df, meta)] + ex.other_records(wp.NAME, meta)
fig = wp.draw(runs)
ex.stamp(fig, meta, f"M,N,K = {int(df.M.iloc[0])},{int(df.N.iloc[0])},{int(df.K.iloc[0])}")
ex.save(fig, "01_wave_pattern", figures_dir)

# %% [markdown]
# **Paper vs ours.** Paper: 4 waves on 128 SMs, tiles of a wave within 5% of a wave. Ours (below): waves on 132 SMs, agreement of the completion order with the model, and the largest spread of end times inside a wave relative to the wave's duration.

# %%
per_gpu = {ex.gpu_name(m): wp.detect_waves(d) for d, m in runs}
pd.concat(per_gpu, names=["gpu"]).groupby(["gpu", "config", "swizzle"], sort=False)[
    ["waves", "agreement", "spread_over_wave"]].mean()
