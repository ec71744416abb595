# %% [markdown]
# # 12 · How wrong is the predictor?
#
# **Reproduces:** Fig. 15 (the CDF of the predictor's error, and the chosen partition against the
# best measured one).
#
# **Paper (§6.5).** Over more than 250 (shape, partition, parallelism) combinations per GPU type, the
# latency model's mean error is **3.41%** on the RTX 4090 and **3.44%** on the A800; the measured time
# is almost always slightly *above* the prediction; and the partition the search picks reaches
# **> 99%** of the best one measured.
#
# **What is compared.** The tuner never runs a candidate partition: it predicts each one's latency
# from a GEMM profile (time per wave) and a bandwidth curve, and keeps the fastest prediction. The
# overlap sweeps (notebooks 03-05 on one GPU, 08 with NCCL) *did* run several candidates per case
# and recorded, for each, the refined model's latency beside the measured one. Two numbers come out
# of that record:
#
# * the **relative error** `|predicted - measured| / measured` of every measured candidate, drawn as a
#   CDF: how often the model is within x% of the truth;
# * the **chosen / best** ratio per case: the measured time of the best candidate over that of the
#   tuner's pick. A model can be off by several percent and still pick well, as long as it ranks the
#   candidates in the right order.
#
# **Eager or graph?** Each candidate was timed twice. *Eager*, the host launches the GEMM, then each
# group's wait and collective, then the post-reorder: with many small groups the host's launch time
# can exceed the GPU's work and show up in the measured time. *Replayed as one CUDA graph*, the host
# is out of the picture and what remains is device time, which is what the model describes (the NCCL
# sweep's model parameters were fitted on graph replays; its sidecar names the calibration). The graph
# time is the fair test of the model; the eager time is what an application that does not capture
# graphs would see.
#
# **Here.** One H200 with the emulated link (loopback through pinned host memory, two virtual
# ranks) and two H200s with NCCL over NVLink. `mode="auto"` measures the one-GPU sweep again on a
# GPU; the NCCL record is the one notebook 08 measured (freshly, where this machine has 2+ GPUs).

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
pe = ex.prediction_error

# %% [markdown]
# Every data set's candidates: one row per (case, partition) with the model's and the measured times.

# %%
sets = pe.run(mode, data_set, quick)
recorded = {ds: pe.recorded(ds) for ds in sets}
for ds, (df, summary, meta) in recorded.items():
    print(f"{ds}: {pe.label(meta, summary)}: {len(df)} candidates in {df.groupby(['primitive', 'shape']).ngroups} cases")
df, _, _ = recorded[sets[0]]
df[["primitive", "shape", "partition", "model_ms", "measured_ms", "measured_graph_ms"]].head()

# %% [markdown]
# **The figure.** Left: the CDF of the relative error, one colour per data set, solid for graph
# replays and dashed for eager calls; the dotted line is the paper's mean error (3.41% and 3.44% are
# one line at this scale). Right: per case, the best measured time over the tuner's pick (100% = it
# picked the best one), the cases sorted, on a shared axis so that sweeps of different sizes compare.

# %%
import numpy as np
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
for color, (ds, (df, summary, meta)) in zip(colors, recorded.items()):
    for measured, style in (("measured_graph_ms", "-"), ("measured_ms", "--")):
        if measured not in df or df[measured].isna().all():
            continue  # a sweep without CUDA-graph replays (the one calibrate runs)
        err = pe.relative_errors(df, measured)
        x, y = pe.cdf(err * 100)
        ax1.step(x, y, style, where="post", color=color,
                 label=f"{pe.label(meta, summary, prefix='')}, {pe.TIMINGS[measured]}: mean error {err.mean():.1%}")
        chosen = np.sort(pe.chosen_vs_best(df, summary, measured).chosen_of_best * 100)
        # Same colour, style and label as the error curve of the same data: one legend entry names both.
        ax2.plot(np.arange(1, len(chosen) + 1) / len(chosen), chosen, style, color=color, marker=".", ms=3,
                 label=f"{pe.label(meta, summary, prefix='')}, {pe.TIMINGS[measured]}")
ax1.axvline(3.41, color="0.3", lw=1, ls=":", label="paper: mean error 3.41% (RTX 4090), 3.44% (A800)")
ax1.set(xscale="log", xlim=(0.05, 100), ylim=(0, 1.02), xlabel="|predicted - measured| / measured (%)",
        ylabel="share of candidates", title="The model's error on every measured candidate")
paper_pick = ax2.axhline(99, color="0.3", lw=1, ls=":", label="paper: chosen > 99% of the best")
ax2.set(xlim=(0, 1.02), xlabel="share of cases (sorted)", ylabel="best / chosen, measured (%)",
        title="The tuner's pick against the best measured partition")
handles = ax1.get_legend_handles_labels()[0] + [paper_pick]
fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=8, frameon=False)
links = " + ".join(dict.fromkeys(str(m.get("link")) for _, _, m in recorded.values()))
ex.stamp(fig, {**recorded[sets[0]][2], "link": links},
         extra="; ".join(f"{ds}: {str(m.get('date', '?'))[:10]}" for ds, (_, _, m) in recorded.items()))
ex.save(fig, "12_prediction_error", figures_dir)

# %% [markdown]
# **Paper vs ours.** "measured > predicted" is the share of candidates the model under-estimates (the
# paper: nearly all). "chosen / best" is the mean (and worst) over cases of the best measured time over
# the tuner's pick.

# %%
table = pe.table(sets)
pe.side_by_side(table)

# %% [markdown]
# **Reading it** (the recorded H200 data; a fresh measurement may move the numbers a little). On the
# emulated link the model is as close as the paper's (means of 2-3%), but it mostly over-estimates
# (the measurement is below the prediction for about four candidates in five), where the paper's
# under-estimates. With NCCL the graph-replay error is about twice the paper's, and, as in the paper,
# the measurement is above the prediction for most candidates, by a similar share whether a candidate
# has one group or ten: a proportional offset (likely the GEMM beside NCCL's kernels, or the link,
# running slower than the profile and the curve say), not a cost per group. An offset that moves
# every candidate of a case alike leaves their order intact, so the picks stay within about half a
# percent of the best on average. Eager NCCL calls add host time the model was not fitted to; the
# error doubles again and the picks suffer most (the worst in All-to-All cases). The H100's sweep is
# the one `python -m fo_lib calibrate` runs before it fits the constants, so it shows the model with
# its default constants (no slowdowns fitted): 6 % and always under the measurement; fitted there,
# the same model errs by 1.7 % on shapes it never saw (`data/h100/predictor_heldout.csv`).
