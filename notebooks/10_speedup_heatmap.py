# %% [markdown]
# # 10 · Speedup heat map and the theoretical bound
#
# **Reproduces:** Fig. 13 (speedup over M·N × K, and the share of the theoretical bound reached),
# on one GPU over an emulated link.
#
# **Paper (§6.4).** Heat maps for GEMM+RS on two RTX 4090s and GEMM+AR on four A800s: FlashOverlap
# reaches **more than 80% of the theoretical bound in most cases**, less at small M·N, where a
# GEMM has few waves and each group's message is small.
#
# **What the bound is.** An overlapped call cannot end before the GEMM has finished and the last
# group's collective has run after it (*compute dominates*: `GEMM + c(last group)`), nor before the
# first wave has finished and every group's collective has run back to back (*communication
# dominates*: `first wave + Σ c(group)`). The bound is the larger of the two
# (`fo_lib.experiments.heatmap.theoretical_bound`). Every input is measured in the same run: the
# GEMM is the faster of cuBLAS and ours on all SMs (the baseline computes with cuBLAS, so the ideal
# should too), the first wave comes from the GEMM profile (per-tile clock stamps on the CTAs the
# overlapped GEMM runs), and each group's collective time is the link curve (the collective alone,
# sampled in-process) at the group's bytes, for the partition the tuner predicts.
#
# **What is timed.** Per cell, in interleaved rounds: cuBLAS then the collective (the paper's
# non-overlapped baseline), our GEMM, cuBLAS, the collective alone, and the overlapped call with the
# predicted partition, the finest and no overlap (the overlap sweep of notebooks 03–05, three
# candidates a cell). The *tuned call* is the predicted partition where the tuner overlaps, else
# its fallback (cuBLAS then the collective: speedup 1, hatched). `bound_ratio` = bound / tuned call
# = achieved speedup / theoretical speedup.
#
# **Here.** One H200, the loopback link of W = 2 identical virtual ranks through pinned host
# memory: an *emulated link* that is slower than NVLink, so most cells are communication-bound.
# N = 8192; M from 256 and 512 (a single wave: the GEMM's tiles fit its 128 CTAs at once, so there
# is nothing to overlap) to 8192 (16 waves).

# %% tags=["parameters"]
# Parameters (papermill): mode "auto" measures where the needed GPU exists, else replays data/<data_set>/.
mode = "auto"
quick = False
data_set = "h200"
figures_dir = None  # default: <repo>/figures

# %%
# Inline figures in Jupyter (headless under papermill too); ex.save writes figures/.
# %matplotlib inline
from fo_lib import experiments as ex
figures_dir = ex.notebook_setup(quick, figures_dir)  # checks quick is a bool; default <repo>/figures

# %% [markdown]
# The cells: one row per (primitive, M, N, K). `waves` is the GEMM's wave count on the CTAs it
# keeps beside the link; `bound_regime` says which side of the bound decides.

# %%
data_set = ex.heatmap.run(mode, data_set, quick)
df, meta = ex.heatmap.load(data_set)
if df is not None:
    display(df[["primitive", "M", "K", "waves", "predicted_partition", "tuner_overlaps", "cublas_then_comm_ms",
                "tuned_call_ms", "speedup", "bound_ms", "bound_regime", "bound_ratio"]].round(3))

# %% [markdown]
# Left: speedup of the tuned call over cuBLAS then the collective. Right: how much of the
# theoretical speedup that is. Hatched cells are where the tuner falls back to no overlap (one
# wave, or a model that predicts no gain).

# %%
# Below, the same grid from every other GPU in data/ (the H100's beside the H200's), where recorded.
others = ex.other_records(ex.heatmap.NAME, meta)
fig = ex.heatmap.plot(df, meta, others)
ex.save(fig, "10_speedup_heatmap", figures_dir)

# %% [markdown]
# The paper's statement beside ours: the ratio over the cells with at least two waves (a one-wave
# GEMM's bound is the sequential time itself), split at the median M·N.

# %%
ex.heatmap.summary(df, meta, others)
