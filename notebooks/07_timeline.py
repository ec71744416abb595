# %% [markdown]
# # 07 · Timeline
#
# **Reproduces:** Fig. 2 and Fig. 6 (GEMM waves and each wave group's collective, overlapped) as a
# modelled and a measured timeline.
#
# **Paper (Fig. 2/6).** Compute waves and the communication of each wave group, overlapped.
#
# **Here.** The refined model's timeline for a recorded GEMM profile and link curve (per-wave
# durations measured by the probe on the H200, curve measured on the emulated link), for the chosen
# partition and for no overlap.

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
import json
from fo_lib.profiles import BandwidthCurve, GemmProfile
from fo_lib.predictor import OverlapModel
from fo_lib.provenance import DATA_DIR
saved = json.loads((DATA_DIR / data_set / "overlap_loopback_profiles.json").read_text())
prof = [p for p in saved["profiles"] if p["primitive"] == "all_reduce"][-1]
prim = prof.pop("primitive")
profile = GemmProfile.from_dict(prof)
curve = BandwidthCurve.from_dict(saved["curves"][prim])
res = OverlapModel(profile, curve, "refined").tune()
_, meta = ex.load(data_set, "overlap_loopback")
print(profile.M, profile.N, profile.K, "waves", profile.num_waves, "chosen", list(res.choice.partition))

# %%
fig, axes = plt.subplots(2, 1, figsize=(12, 4.5), sharex=True, layout="constrained")
for ax, (name, pred) in zip(axes, [("the tuned partition", res.choice), ("no overlap (one group)", res.no_overlap)]):
    ex.timeline.plot_model(ax, pred)
    ax.set_title(f"Modelled timeline, {name}: waves per group {list(pred.partition)}, {pred.total_ms:.3f} ms")
axes[0].set_xlabel("")  # the shared axis is named under the lower panel
ex.stamp(fig, meta, f"{prim} {profile.M}x{profile.N}x{profile.K}")
ex.save(fig, "07_timeline", figures_dir)

# %% [markdown]
# **Measured.** One real call per shape, timed with CUDA events
# (`OverlapPlan.timed_run`): the GEMM from start to last tile; each group from the return of its
# counter wait (its tiles done and the previous collective finished) to the end of its collective;
# the post-reorder in its stages (the rows the early groups complete, restored as soon as their
# collective is done, then the last group's rows). The whole call is enqueued behind a GPU sleep, so
# the spans are the device's, free of the host's launch time (without it, the first wait returned
# only when the host had launched it, ~0.2 ms late). Under each, the model's timeline for the same
# partition. Recorded by `scripts/record/record_timeline.py` (one GPU: loopback; under torchrun: NCCL;
# `--copy-engine`: the AllReduce as an AllGather per group on NCCL's copy engines, summed by the
# post-reorder, in `data/<set>/copy_engine/`), measured here when a GPU is present.

# %%
sets = [data_set] + [s for s in ex.multi_gpu.data_sets() if s != data_set]
sets += [f"{s}/{ex.multi_gpu.COPY_ENGINE}" for s in ex.multi_gpu.data_sets()]
if ex.resolve_mode(mode) == "measure":
    ex.timeline.run(mode, data_set, quick)
    sets.insert(0, ex.measured_set(quick))
timelines = ex.timeline.recorded(dict.fromkeys(sets))
if not timelines:
    print("no measured timeline recorded yet in", sets, "- run scripts/record/record_timeline.py on a GPU")
for ds, tl, tmeta in timelines:
    shapes = list(tl.groupby(["primitive", "M", "N", "K", "partition"], sort=False))
    fig, axes = plt.subplots(len(shapes), 1, figsize=(12, 3.0 * len(shapes)), squeeze=False, layout="constrained")
    for ax, ((prim, M, N, K, part), g) in zip(axes[:, 0], shapes):
        ex.timeline.plot(ax, g)
        gathered = "reduction" in g and (g.reduction == "post_reorder").any()
        ax.set_title(f"{ex.PRIMITIVE_TITLES[prim]} after a {M}x{N}x{K} GEMM, waves per group {part}"
                     + ("; an AllGather per group on the copy engines, summed by the post-reorder" if gathered else ""),
                     fontsize=9)
    ex.stamp(fig, tmeta, ds)
    ex.save(fig, f"07_timeline_measured_{ds.replace('/', '_')}", figures_dir)

# %% [markdown]
# Measured beside modelled, per shape: the GEMM's end, the first group's wait return, the
# last collective's end, and what the post-reorder adds after it (the model stops at the last
# collective). On the H200s the modelled GEMM ends within 4% of the measured one and the first
# group's wait returns ~12 µs later than modelled (the wait kernel's wake-up); the collectives run
# 7-18% longer than the curves say while the GEMM shares the GPU (what the calibration's
# `comm_slowdown` absorbs), and the post-reorder's last stage adds 0.02-0.06 ms. On the emulated link
# the first group, the only one beside the GEMM, takes 1.16x (AllReduce) to 1.31x (All-to-All) its
# curve while the groups after the GEMM's end match it: the link's finishing step (the reductions'
# scale, the All-to-All's copies) shares the GPU with the GEMM. The slowdown belongs to the time a
# collective shares the GPU, which `OverlapModel(contention="gemm_overlap")` models; the loopback
# record's model is fitted that way (on the previous run). Before the link's finishing step became a
# scale kernel and device copies, the All-to-All's first group took 2.8x its curve
# (docs/decisions.md, "Identical ranks are finished by a scale kernel and device copies").

# %%
pd.concat([ex.timeline.summary(tl).assign(data_set=ds) for ds, tl, _ in timelines], ignore_index=True).round(3)
