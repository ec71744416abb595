# %% [markdown]
# # 03 · Partition design space
#
# **Reproduces:** Fig. 9 (the wave-group design space) and §4.1.1's statistic on the finest
# partition (the equal-size groups of Fig. 14's ablation).
#
# **Paper (§4.1.1).** On 4×RTX 4090 AllReduce over 50+ sizes, one-wave-per-group (the finest
# partition) is the best in only **4%** of shapes, and forcing it costs **17.34%** on average: the
# partition must be tuned.
#
# **Here.** Every measured candidate partition per shape (GEMM + collective on one H200 over the
# loopback *emulated* link, W = 2), from `scripts/bench/bench_overlap.py`.

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
data_set = ex.overlap.run(mode, data_set, quick)
df, meta = ex.overlap.candidates(data_set)
stat = ex.overlap.finest_statistic(df)
stat

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=False)
for ax, (prim, g) in zip(axes, df.groupby("primitive")):
    for shape, gs in g.groupby("shape"):
        gs = gs.sort_values("groups")
        ax.plot(gs.groups, gs.measured_ms / gs.measured_ms.min(), "o", ms=3, label=shape)
    ax.set(title=f"{ex.PRIMITIVE_TITLES[prim]}: every candidate partition", xlabel="wave groups in the partition",
           ylabel="latency / best partition's latency")
    ex.figure_checks.count_axis(ax.xaxis)
    ax.legend(fontsize=6, title="M x N x K", title_fontsize=6)
ex.stamp(fig, meta)
ex.save(fig, "03_partition_sweep", figures_dir)

# %% [markdown]
# **Paper vs ours.** The statistic on the emulated link, and over the (shape, NCCL CTA
# budget) cases of each multi-GPU record, timed as whole-call CUDA-graph replays (with several budgets
# per shape these are 50+ cases, as in the paper).

# %%
table = {"paper (4x4090, AR)": {"shapes": "50+", "finest is best (share of shapes)": ex.overlap.PAPER["finest_best_share"],
                               "mean loss of finest": ex.overlap.PAPER["finest_mean_loss"]}}
def _row(st):
    return {"shapes": len(st), "finest is best (share of shapes)": st.finest_is_best.mean(),
            "mean loss of finest": st.finest_loss.mean()}
table[f"ours ({meta.get('gpu')}, emulated link)"] = _row(stat)
for ds in ex.multi_gpu.data_sets():
    nccl, nmeta = ex.overlap.candidates(ds)
    if "measured_graph_ms" in nccl:
        table[f"ours ({nmeta.get('link')}, graph replay)"] = _row(ex.overlap.finest_statistic(nccl, "measured_graph_ms"))
pd.DataFrame(table).T
