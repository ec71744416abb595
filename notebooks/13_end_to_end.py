# %% [markdown]
# # 13 · End to end: one transformer layer with its projections overlapped
#
# **Reproduces:** Fig. 12 (end-to-end speedup) on the layers of Tab. 4 (Llama 3 70B served with
# TP 8, Mixtral 8x7B with expert parallelism), one layer at a time, on one GPU over an emulated link.
#
# **Paper (§6.3).** Whole models on 8 A800s (vLLM, Megatron-LM, xDiT): FlashOverlap speeds them up
# by **1.05–1.13x**. The gain is smaller than a single GEMM's (notebooks 05, 08, 10) because only
# the GEMM + communication parts of a layer change; attention, norms and the other GEMMs do not.
#
# **The layers** (`fo_lib.experiments.e2e_blocks`):
#
# * **Llama 3 70B block, tensor parallel over W ranks.** The QKV and gate/up projections are
#   column-parallel (`torch.matmul`, no communication); attention is causal
#   `scaled_dot_product_attention` on the rank's heads (no rotary embedding, no KV cache); the
#   attention output projection and the MLP down projection are `RowParallelLinear`: one
#   overlapped GEMM + AllReduce each, whose post-reorder adds the residual, stores the pre-norm
#   sum (the residual stream, `residual_out`) and applies the RMSNorm that follows.
# * **Mixtral 8x7B combine step, expert parallel over W ranks.** Each rank's expert rows are
#   projected back to the hidden size and sent to their tokens' home ranks by `MoECombine` (GEMM +
#   All-to-All overlapped); the home rank sums each token's top-2 contributions with its gates,
#   adds the residual and normalises. Not in it: the router, the dispatch All-to-All, the experts'
#   gate/up, tensor parallelism inside an expert.
#
# The **baseline** is the same layer with the same weights, each projection as `torch.matmul` and
# one collective on the whole output (then, in the block, the residual add and torch's `rms_norm`).
# Both are checked against a float64 reference of the whole layer before they are timed in
# interleaved rounds.
#
# **Here.** One H200: the loopback link of W identical virtual ranks (W = 8 for Llama, 4 for
# Mixtral, Table 4's degrees) through pinned host memory: an *emulated link*, slower than the
# A800s' NVLink, so the numbers are not the paper's setting. With no GPU and no record, this
# notebook shows the layer's correctness check on the CPU loopback instead.

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
# **Correctness first, on the CPU.** The same layers at small sizes on `CpuLoopbackCommunicator`
# (W = 1, 2, 4 identical virtual ranks, 64x64 tiles on 2 "SMs" so that every projection runs in
# several wave groups). Errors are relative (Frobenius) against the float64 layer:
# `rel_err` the overlapped layer, `baseline_rel_err` the baseline, `residual_rel_err` the residual
# stream the block hands on; `groups` the wave groups of each overlapped GEMM.

# %%
checked = ex.e2e_layer.cpu_check()
display(checked)

# %% [markdown]
# **The measurement** (or its record in `data/<gpu>/e2e_layer.csv`): per layer and world size the
# overlapped and baseline layer's time (medians of interleaved rounds), the speedup, and the
# overlapped layer's error against float64 on the GPU; `gemms` lists each overlapped GEMM on a
# rank and its wave groups.

# %%
data_set = ex.e2e_layer.run(mode, data_set, quick)
df, meta = ex.e2e_layer.load(data_set)
if df is not None:
    display(df[["layer", "tokens", "world_size", "link", "ours_ms", "baseline_ms", "speedup", "rel_err",
                "gemms"]].round(4))

# %%
fig = ex.e2e_layer.plot(df, meta, checked)
ex.save(fig, "13_end_to_end", figures_dir)

# %% [markdown]
# The paper's end-to-end range beside ours, layer by layer. A layer's speedup is bounded by the
# share of its time spent in the overlapped GEMMs and their collectives, and where communication
# dominates (a slow link) the overlap can hide at most the GEMMs' time.
#
# **Reading the H200 record** (`data/h200/e2e_layer.csv`): the Mixtral combine gains 1.23x at 8192
# tokens and 1.38x at 32768, its All-to-All hidden behind GEMMs of 4096 columns x 14336. The Llama
# block at W = 8 is 0.98x at 4096 tokens and 1.01x at 16384: each AllReduce sends a tokens x 8192
# output through the emulated ring (~55 GB/s), milliseconds against GEMMs of 0.1-1.4 ms per rank,
# so there is little to hide and the eight wave groups' extra collectives cost about what the
# overlap saves. These layers use the engine's default partition; the modules'
# `check=OverlapCheck()` would time the fallback and keep it where overlap loses (`fo_lib.partition_tuning`),
# which this record does not do.

# %%
ex.e2e_layer.summary(df)
