# %% [markdown]
# # 09 · Partition explorer
#
# **Reproduces:** Fig. 9 (the wave-group design space: 2^(T-1) partitions of T waves), with Fig. 6's
# group-wise tile counting and Alg. 1's predictor, for any GEMM shape, tile config and link you pick.
#
# **Paper (§4.1, Fig. 9).** A GEMM of T waves can signal its tiles in any of 2^(T-1) wave groups; for
# T = 5, (1,2,2) and (2,3) are two of the 16. Small groups start communication early but pay each
# collective's latency; large groups amortise it but leave less to hide behind. Algorithm 1 predicts
# each partition's latency from the GEMM's wave times and the link's latency curve and picks one.
#
# **Here.** Move a control, or type M, N, K exactly, and the figure redraws (well under a second):
# the tile -> wave map with the chosen partition's groups (the tiles each counter counts), the
# predicted timelines of the chosen partition, the finest one and no overlap, and, for T <= 12,
# every partition's predicted time. Links: every curve measured under `data/` (2 H200s over NVLink with NCCL's kernels at each
# recorded CTA budget and with its copy engines; one H200's emulated link) and two *modelled* links
# (RTX 4090s over PCIe, A800s over NVLink: latency + bandwidth assumptions, cited in
# `fo_lib/experiments/explorer/`). The GEMM's wave times are the recorded profile when the data
# has this exact GEMM, else a throughput model (one tile's FLOPs at a per-SM rate) that says so.
# On a CUDA GPU, **measure on GPU** runs the shown view there and draws the model against it.
# Headless (papermill) this notebook draws the default view; open it in JupyterLab for the controls.

# %% tags=["parameters"]
# Parameters (papermill). The explorer predicts on the CPU (a GPU only for "measure on GPU"): mode
# and data_set are accepted like every notebook's (run_all.sh passes them) but every recorded data
# set is a link preset anyway.
mode = "auto"
quick = False
data_set = "h200"
figures_dir = None  # default: <repo>/figures
link = "h200x2 nccl"  # the default view's link preset (ex.explorer.presets() lists them)

# %%
# Inline figures in Jupyter (headless under papermill too); ex.save writes figures/.
# %matplotlib inline
import pandas as pd
from IPython.display import display
from fo_lib import experiments as ex
figures_dir = ex.notebook_setup(quick, figures_dir)  # checks quick is a bool; default <repo>/figures
pd.DataFrame([{"key": k, "link": p.label, "collectives": ", ".join(p.primitives), "world": p.world_size,
               "source": p.source} for k, p in ex.explorer.presets().items()])

# %% [markdown]
# **The default view.** An AllReduce after a 4096x8192x1024 bf16 GEMM on 2 H200s (Llama-3-70B's
# attention output projection at TP=8 on 4096 tokens): the Hopper kernel's 128x256 tiles on the 108
# CTAs NCCL's default leaves free make 10 waves, whose recorded wave times and NCCL curve decide the
# partition. Here the choice matters: the best partition is 1.5 % ahead of the runner-up and the
# finest one is 31 % slower (the summary line says how far the runner-up is; at K = 8192 some 170
# partitions tie within 0.2 %, since the longer waves hide every collective but the last).

# %%
view = ex.explorer.explore(link=link)
fig = ex.explorer.draw(view)
ex.save(fig, "09_explorer", figures_dir)
display(fig)
print(view.summary())
print(view.grid.describe())

# %% [markdown]
# **Fig. 9's example, T = 5.** A 2048x8192x8192 GEMM has 5 waves on the same link: all 16 partitions,
# (1,2,2) and (2,3) among them, fastest first.

# %%
t5 = ex.explorer.explore(M=2048, K=8192, link=link)
ex.explorer.design_table(t5).round(4)

# %% [markdown]
# **Explore.** Every control redraws the figure's three panels (typed partitions: group sizes such
# as `1,2,2` that sum to T; an impossible input shows its error in one line and keeps the last
# figure). M, N and K take exact values in the box beside each slider (Enter applies). The figure
# takes the notebook's width: collapse JupyterLab's file browser (Ctrl+B) to widen it.
#
# **Measure on GPU** (`fo_lib.experiments.explorer.measure`) runs the shown view on this machine's GPU:
# the GEMM with the shown tile config, raster and CTA count, stamping each tile's finish time, drawn
# over the modelled waves; and one overlapped call of the chosen partition over the emulated link
# (one GPU, `world size` virtual ranks: `fo_lib.comm.loopback`), drawn under the predicted timeline
# with both totals and their difference. The first measure of a view compiles its kernels and builds
# its plan (progress beside the button); a repeated one reuses them. The prediction is for the chosen
# link preset: pick the emulated link's preset to compare like with like. Without a CUDA GPU the
# button is disabled and says why.

# %%
ex.explorer.widget(ex.explorer.ExplorerInput(link=link))
