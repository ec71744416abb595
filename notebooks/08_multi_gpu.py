# %% [markdown]
# # 08 · Several GPUs with NCCL
#
# **Reproduces:** Fig. 10 (speedup over cuBLAS then NCCL on several GPUs) and Fig. 8 (bandwidth vs
# message size: NCCL's curves); the time breakdown uses Fig. 13's bound.
#
# **Paper (§6.2, AE §A.5.1).** On 2, 4 and 8 GPUs FlashOverlap beats cuBLAS followed by NCCL by up to
# **1.30×** on A800 (NVLink) and **1.65×** on RTX 4090 (PCIe), for AllReduce, ReduceScatter and
# All-to-All; communication kernels take SMs from the GEMM, which the wave count must account for.
#
# **Here.** H200s linked by NVLink (NVLink multicast off), one process per GPU under torchrun:
# NCCL's latency curves, the SMs its kernels take from a GEMM beside them (NCCL's CTA count, and the
# GEMM CTAs it delays), and the speedup sweep over the paper's shapes and Llama-3-70B TP=8 layers.
# For each shape the tuner picks, *by prediction only*, the wave partition, the NCCL CTA budget (8, 16
# or NCCL's own) and whether to overlap at all: where no overlap can win, it falls back to
# `torch.matmul` then NCCL. The reference is cuBLAS then NCCL's default AllReduce on the whole
# output, timed in the same rounds as the chosen row (for a bounded CTA budget, whose own baseline ran
# on the slower bounded NCCL, the default budget's; in the oldest records the sum of the two medians). The
# overlapped op runs *eager* (GEMM, the communication side replayed as one captured graph,
# post-reorder: three launches) and *replayed as one CUDA graph*; the gap between the two is host time.
# *Checked*: the tuner keeps its predicted choice only if that choice also wins one short timing of
# itself against cuBLAS then NCCL (separate rounds from the reported ones), the guard against a model
# that promises a gain the GPU does not deliver. Where the AllReduce sweep was also recorded in the
# *rows* layout (groups of whole tile rows stored in place, no post-reorder: `layout="rows"`), the
# checked tuner also picks the layout, by the same check timing.
# `mode="auto"` measures when 2+ GPUs are visible; otherwise the largest recorded `data/<gpu>x<W>/`
# is replayed.

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
ds = ex.multi_gpu.run(mode, None, quick)
curves, cmeta = ex.multi_gpu.curves(ds)
fp, fmeta = ex.multi_gpu.footprint(ds)
sweep, meta = ex.multi_gpu.sweep(ds)
picked = ex.multi_gpu.tuner_pick(ex.multi_gpu.sweep_both_layouts(ds))
print("data set", ds)
fp[["primitive", "nccl_max_ctas", "collective_ctas", "collective_threads", "sms_taken", "footprint", "collective_ms"]]

# %%
import numpy as np
fig, axes = plt.subplots(1, 4, figsize=(19, 5.2), layout="constrained", gridspec_kw=dict(width_ratios=[1, 1.3, 1.3, 1]))
ax = axes[0]
for (prim, budget), g in curves.groupby(["primitive", "nccl_max_ctas"]):
    ax.plot(g.bytes, g.bus_gbps, label=f"{ex.PRIMITIVE_TITLES[prim]}, {'default' if budget == 0 else budget} CTAs")
ax.set(xscale="log", xlabel="message size (bytes)", ylabel="bus bandwidth (GB/s)", title="NCCL alone: bandwidth by message size")
ax.legend(fontsize=6, title="collective, NCCL CTAs", title_fontsize=6)
cols = [("tuned_checked_speedup", "tuner's choice, checked, CUDA graph"), ("tuned_graph_speedup", "tuner's choice, CUDA graph"),
        ("tuned_eager_speedup", "tuner's choice, eager"), ("best_eager_speedup", "best measured partition, eager"),
        ("decomposition_speedup", "decomposition"), ("symm_mem_speedup", "PyTorch symm-mem fused (AllReduce, ReduceScatter)")]
for ax, (prim, g) in zip(axes[1:], picked.groupby("primitive", sort=False)):
    x = np.arange(len(g))
    for i, (col, lab) in enumerate(cols):
        ax.bar(x + (i - 2.5) * 0.14, g[col].fillna(0).to_numpy(), 0.14, label=lab)
    ax.axhline(1, color="k", lw=0.8)
    ex.zoom_speedups(ax, g[[c for c, _ in cols]].to_numpy().ravel())
    ax.set_xticks(x, [f"{m}x{n}x{k}" for m, n, k in zip(g.M, g.N, g.K)], rotation=60, fontsize=6)
    ax.set(title=f"{ex.PRIMITIVE_TITLES[prim]} after the GEMM", xlabel="GEMM shape M x N x K",
           ylabel="speedup over cuBLAS then NCCL")
fig.legend(*axes[1].get_legend_handles_labels(), loc="outside lower center", ncol=6, fontsize=7)
ex.stamp(fig, meta, f"W = {int(sweep.world.iloc[0])} GPUs")
ex.save(fig, "08_multi_gpu", figures_dir)

# %% [markdown]
# **Paper vs ours.** The paper's best speedups next to the tuner's on this machine (median over AllReduce shapes whose communication is at least 30% of the cuBLAS GEMM, the worst shape of the sweep, the best), eager and with CUDA graphs. The last table is the host time per group of the eager path (eager minus graph, same partition, divided by the group count).

# %%
modes = ("checked", "graph", "eager") if picked.tuned_checked_ms.notna().all() else ("graph", "eager")
bars = {m: ex.multi_gpu.bar_summary(picked, mode=m) for m in modes}
ours = {f"ours {m}: {k.replace('_', ' ')}": v for m, b in bars.items() for k, v in b.items()
        if k in ("allreduce_median_speedup", "worst_speedup", "max_speedup")}
pd.Series({"paper max, A800 NVLink": ex.multi_gpu.PAPER["speedup_a800_nvlink"],
           "paper max, RTX 4090 PCIe": ex.multi_gpu.PAPER["speedup_4090_pcie"], **ours}).round(3).to_frame("speedup")

# %%
import ast
sweep["groups"] = sweep.predicted_partition.map(lambda s: len(ast.literal_eval(s)))
sweep["host_ms_per_group"] = (sweep.overlap_predicted_ms - sweep.overlap_predicted_graph_ms) / sweep.groups
sweep.groupby("primitive").host_ms_per_group.describe().round(3)

# %%
picked[["primitive", "M", "N", "K", "nccl_max_ctas", "comm_over_cublas", "tuner_overlaps", "tuner_keeps_overlap", "checked_layout", "predicted_partition", "reference_ms", "tuned_eager_ms", "tuned_graph_ms", "tuned_graph_speedup", "tuned_checked_speedup"]].round(3)

# %% [markdown]
# **Where the time goes.** For the best measured candidate of every AllReduce shape (replayed as
# one CUDA graph), its time split into cuBLAS's GEMM time, our GEMM's gap to cuBLAS on all SMs, what
# the GEMM loses on the SMs it leaves to NCCL (its profiled waves on the remaining CTAs), and the rest
# that overlap did not hide (the last group's collective, waits, the post-reorder). Beside it:
# cuBLAS then NCCL at the same NCCL CTA budget, and the overlap bound max(cuBLAS, comm). On 2 GPUs
# NCCL is fast, so the SMs it occupies cost about as much as the overlap can win.

# %%
tb = ex.multi_gpu.time_breakdown(ds)
ar = tb[(tb.primitive == "all_reduce") & (tb.comm_over_cublas >= 0.3)]
budgets = sorted(ar.nccl_max_ctas.unique())
fig, axes = plt.subplots(1, len(budgets), figsize=(6 * len(budgets), 5), squeeze=False, layout="constrained")
for ax, budget in zip(axes[0], budgets):
    g = ar[ar.nccl_max_ctas == budget]
    x = np.arange(len(g))
    bottom = np.zeros(len(g))
    for col, lab in [("cublas_ms", "cuBLAS GEMM"), ("gemm_gap_ms", "our GEMM's time over cuBLAS's"),
                     ("sm_share_ms", "the GEMM's loss to the SMs left to NCCL"),
                     ("exposed_ms", "not hidden (last collective, waits, post-reorder)")]:
        v = g[col].to_numpy() / g.reference_ms.to_numpy()
        ax.bar(x - 0.2, v, 0.4, bottom=bottom, label=lab)
        bottom += v
    ax.bar(x + 0.2, np.ones(len(g)), 0.4, color="0.75", label="cuBLAS then NCCL (= 1)")
    ax.scatter(x - 0.2, g.bound_ms / g.reference_ms, marker="_", s=300, color="k", zorder=3,
               label="the overlap's bound: max(cuBLAS, NCCL alone)")
    ex.zoom_speedups(ax, [0.0, *bottom])  # stacked parts start at 0; ticks every 0.1, grid at 0.05
    ax.set_xticks(x, [f"{m}x{n}x{k}" for m, n, k in zip(g.M, g.N, g.K)], rotation=60, fontsize=6)
    ax.set(title=f"AllReduce, NCCL with {'its default' if budget == 0 else budget} CTAs", xlabel="GEMM shape M x N x K",
           ylabel="time / time of cuBLAS then NCCL")
fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=3, fontsize=7)
fig.suptitle("Where the time of the best overlapped call goes (left bar of each pair), against cuBLAS then NCCL")
ex.stamp(fig, meta, "best graph-replayed candidate per shape")
ex.save(fig, "08_time_breakdown", figures_dir)

# %%
shares = ar[["gemm_gap_ms", "sm_share_ms", "exposed_ms"]].div(ar.reference_ms, axis=0)
shares.assign(nccl_max_ctas=ar.nccl_max_ctas).groupby("nccl_max_ctas").median().round(3)

# %% [markdown]
# **Communication without SMs: NCCL's copy engines.** The breakdown above shows what the SMs
# left to NCCL cost the GEMM. NCCL 2.28 runs AllGather on the copy engines, with no CTA at all, when
# the communicator asks for it (`NCCL_CTA_POLICY_ZERO`) and the buffers lie in symmetric windows. An
# AllReduce needs a sum, so here each group's collective becomes an in-place AllGather of its tiles
# (every rank ends with every rank's copy), and the post-reorder, which reads the buffer anyway, sums
# the `W` copies while it restores the layout (`OverlapPlan(reduction="post_reorder")`,
# `TorchDistCommunicator(copy_engine=True)`). On 2 GPUs the link carries the same bytes as an
# AllReduce; the GEMM keeps every SM but the wait kernel's. Both paths were measured in the same call
# (`data/<set>/copy_engine/`, `bench_nccl.py --copy-engine`); each path's speedup is over cuBLAS then
# NCCL's default AllReduce timed in the same rounds as that path. Starred shapes are those whose
# communication takes at least 30% of the GEMM. The table under the figure is the tuner's choice over
# this record (which takes the copy-engine path wherever it predicts it faster: every shape here).

# %%
ce = ex.multi_gpu.copy_engine_sweep(ds)
if ce is None:
    print(f"{ds}: no copy-engine sweep recorded (scripts/bench/bench_nccl.py --copy-engine)")
else:
    ce_sweep, ce_meta = ce
    cmp_ = ex.multi_gpu.copy_engine_comparison(ce_sweep)
    fig, ax = plt.subplots(figsize=(11, 4.6), layout="constrained")
    x = np.arange(len(cmp_))
    ax.bar(x - 0.2, cmp_.nccl_graph_speedup, 0.4, label="NCCL's kernels: AllReduce per group (24 SMs)")
    ax.bar(x + 0.2, cmp_.copy_engine_graph_speedup, 0.4, label="copy engines: AllGather per group, summed by the post-reorder")
    ax.axhline(1, color="k", lw=0.8)
    ax.axhline(1.2, color="r", ls="--", lw=0.8, label="1.2x speedup")
    ex.zoom_speedups(ax, list(cmp_.nccl_graph_speedup) + list(cmp_.copy_engine_graph_speedup))
    ax.set_xticks(x, [f"{'*' if c >= 0.3 else ''}{m}x{n}x{k}" for m, n, k, c in
                      zip(cmp_.M, cmp_.N, cmp_.K, cmp_.comm_over_cublas)], rotation=60, fontsize=7)
    ax.set(xlabel="GEMM shape M x N x K (*: the AllReduce alone takes at least 30% of the GEMM's time)",
           ylabel="speedup over cuBLAS then NCCL",
           title="The AllReduce on NCCL's kernels or on the copy engines (predicted partition, CUDA graph)")
    fig.legend(fontsize=7, loc="outside lower center", ncol=3)
    ex.stamp(fig, ce_meta, "both paths measured in the same call")
    ex.save(fig, "08_copy_engine", figures_dir)
    ce_picked = ex.multi_gpu.tuner_pick(ce_sweep)
    display(pd.DataFrame({m: ex.multi_gpu.bar_summary(ce_picked, mode=m) for m in ("checked", "graph", "eager")}).T)
