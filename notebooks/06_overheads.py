# %% [markdown]
# # 06 · Overheads
#
# **Reproduces:** Tab. 5 (reorder overheads: the GEMM's signal epilogue and the post-reorder fused
# with RMSNorm).
#
# **Paper (Table 5).** The signal/reorder epilogue costs **0.07%** (A800) / **0.35%** (4090) of the GEMM
# (tile unit); the RMSNorm fused with the post-reorder costs **7.46%** / **8.80%** over a plain RMSNorm.
#
# **Here.** Our signaled GEMM vs the same kernel's plain epilogue, and our post-reorder RMSNorm vs
# `torch.nn.functional.rms_norm` (the baseline does no reorder at all). Where the benchmark timed the
# plain kernel a second time (`--control`), that run is drawn too: its distance from zero is what the
# measurement gives two identical kernels, the scale against which the epilogue's cost is read.
# `mode="auto"` measures both on a GPU (the benchmarks of `scripts/bench/bench_gemm.py --graph
# --control` and `bench_postops.py`; `quick` runs 4 GEMM shapes and 4 row/width pairs) and records
# them in `data/<gpu>[-quick]/`; without a GPU it replays `data/<data_set>/`.

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
from fo_lib import experiments as ex
figures_dir = ex.notebook_setup(quick, figures_dir)  # checks quick is a bool; default <repo>/figures

# %%
data_set = ex.overheads.run(mode, data_set, quick)
g, gmeta = ex.overheads.gemm_overheads(data_set)
r, rmeta = ex.overheads.rmsnorm_overheads(data_set)
ex.overheads.summary(data_set)

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
lab = [f"{m}x{n}x{k}" for m, n, k in zip(g.M, g.N, g.K)]
ax1.plot(range(len(g)), g.signal_pct, "o-", label="signal (the engine's store + counter)")
if "scatter_pct" in g:
    ax1.plot(range(len(g)), g.scatter_pct, "s-", label="row-table store, no signal")
if "control_pct" in g:
    ax1.plot(range(len(g)), g.control_pct, "x:", color="gray", label="plain again (the noise floor)")
ax1.axhline(0, color="k", lw=0.8)
ax1.set_xticks(range(len(g)), lab, rotation=90, fontsize=6)
ax1.set(xlabel="GEMM shape M x N x K", ylabel="time over the plain GEMM's (%)",
        title="What the signalling epilogue adds to the GEMM")
ax1.legend()
for n, gr in r.groupby("N"):
    ax2.plot(gr.R, gr.overhead_pct, "o-", label=f"N = {n}")
ax2.axhline(0, color="k", lw=0.8)
ax2.set(xscale="log", xlabel="rows R", ylabel="time over torch's rms_norm (%, < 0: faster)",
        title="Post-reorder fused with RMSNorm, against torch")
ax2.legend(title="row width", loc="center left", bbox_to_anchor=(1.0, 0.5))
ex.stamp(fig, gmeta)
ex.save(fig, "06_overheads", figures_dir)
