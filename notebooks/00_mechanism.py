# %% [markdown]
# # 00 · The mechanism, step by step
#
# **Reproduces:** Fig. 1 and Tab. 1 (decomposition vs fusion vs signalling), Fig. 5/6 (signalling
# with a group-wise counting table) and Fig. 7 (pre- and post-communication reorder, AllReduce) on a
# toy GEMM; runs on a laptop CPU in one process.
#
# **The idea in one sentence.** A GEMM `C = A @ B.T` is followed by a collective (here AllReduce)
# on `C`; FlashOverlap keeps the GEMM *one* kernel, lets it count finished output tiles per *wave
# group* in a small counting table, and starts a stock collective on each group's tiles as soon as
# the group is complete, while the GEMM computes the rest.
#
# This notebook follows one call of a GEMM with 8 output tiles on 2 "SMs", the example of the paper
# notes: 4 waves, grouped `{W1}, {W2, W3}, {W4}`. Nothing below is drawn by hand: every table comes
# from `fo_lib.tiling` and `fo_lib.reorder`, the event sequence is derived from them
# (`fo_lib.experiments.mechanism`), and it is checked against a real run of `fo_lib.engine.OverlapPlan`
# on the CPU executor (W identical virtual ranks, no GPU).

# %% tags=["parameters"]
# Parameters (papermill): mode "auto" measures where the needed GPU exists, else replays data/<data_set>/.
# This notebook needs neither: it computes everything live on the CPU, whatever the mode.
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

# %% [markdown]
# ## 1 · Tiles, raster order and waves
#
# The GEMM cuts `C[M, N]` into `BM x BN` tiles. A *persistent* kernel launches one CTA per SM; CTA
# `b` of `P` computes schedule indices `s = b, b + P, b + 2P, ...`, so the tiles run in **waves** of
# `P` tiles: wave `s // P`.
#
# Which tile is schedule index `s`? The *raster order*. Plain row-major would walk tile row 0 first;
# GEMMs instead *swizzle*: they walk a band of `swizzle` tile rows column by column, so the tiles of
# a wave share rows of `A` and columns of `B` in the L2 cache. Our toy: `C` is 128 x 256 in 64 x 64
# tiles (2 x 4 = 8 tiles, numbered row-major `t0..t7`), 2 CTAs, swizzle 2.

# %%
from fo_lib import gemm
from fo_lib.experiments import mechanism as mech

M, N, K, W = 128, 256, 32, 2            # W: the world size, virtual ranks of the CPU loopback
SMS = 2                                 # two "SMs": two tiles per wave
config = gemm.CONFIGS["64x64x32"].with_raster("row", 2)
grid = config.grid(M, N, SMS)
print(grid.describe())
pd.DataFrame({"schedule s": range(grid.num_tiles), "CTA": [s % grid.ctas for s in range(grid.num_tiles)],
              "wave": [f"W{s // grid.ctas + 1}" for s in range(grid.num_tiles)],
              "tile (row-major id)": grid.schedule,
              "(tile row, tile col)": [divmod(int(t), grid.tiles_n) for t in grid.schedule]}).set_index("schedule s").T

# %% [markdown]
# Wave W1 is tiles `t0` and `t4`: one above the other, **not** next to each other in memory (`C` is
# row-major: `t0` and `t4` are 64 rows apart). Keep that in mind: a collective needs one contiguous
# buffer, so the tiles of a wave cannot be sent where they lie. That is what the reorder of §3 fixes.
#
# ## 2 · Wave groups and the counting table
#
# Communicating after every tile would send tiny messages (a tile reaches a small fraction of a
# link's bandwidth, paper Fig. 8), and waiting for the whole GEMM overlaps nothing. FlashOverlap
# groups consecutive waves: a *partition* of the 4 waves, here `(1, 2, 1)`:
# `G1 = {W1}`, `G2 = {W2, W3}`, `G3 = {W4}` (the tuner of notebook 04 picks it for real shapes).
#
# Two precomputed tables drive the signal: `tile_group[t]` (the group of tile `t`) and
# `group_tiles[g]` (how many tiles group `g` holds: the counter's target). When a CTA has stored a
# tile it does `atomicAdd(&counter[tile_group[t]], 1)`; the communication stream waits until
# `counter[g] == group_tiles[g]`.

# %%
from fo_lib.engine import OverlapPlan

PARTITION = (1, 2, 1)
comm = mech.RecordingCommunicator(W)    # the CPU loopback, recording each collective for §5
plan = OverlapPlan("all_reduce", M, N, K, comm, device="cpu", sm_count=SMS, config=config, partition=PARTITION)
tables = plan.tables                    # fo_lib.reorder.tile_reorder(grid, PARTITION)
print(plan)
pd.DataFrame({"tile": range(grid.num_tiles), "wave": [f"W{w + 1}" for w in grid.tile_wave],
              "tile_group": [f"G{g + 1}" for g in tables.tile_group]}).set_index("tile").T

# %%
print("group_tiles (counter targets):", tables.group_tiles.tolist())

# %% [markdown]
# ## 3 · The pre-communication reorder: one contiguous slice per group
#
# The GEMM's epilogue does not store a tile where it belongs in `C`. It stores it through a mapping
# table, `row_offset[i, tn]`: the buffer position of row `i` of tile column `tn`. The table lays the
# tiles out group by group (and, inside a group, in the order they finish), so **each group's tiles
# form one contiguous slice** `[start, stop)` of the send buffer, and a stock collective
# (`ncclAllReduce(buf + start, stop - start, ...)`) can send it as is.

# %%
trace = mech.counting_trace(tables, rank=plan.rank)
pd.DataFrame({"tile": range(grid.num_tiles), "group": [f"G{g + 1}" for g in trace.tile_group],
              "buffer slot": trace.tile_slot, "first element": trace.tile_offset}
             ).sort_values("buffer slot").set_index("buffer slot").T

# %%
pd.DataFrame({"group": [f"G{g + 1}" for g in range(trace.num_groups)], "waves": PARTITION,
              "tiles (target)": trace.group_tiles,
              "slice from the store table": [f"[{s}, {e})" for s, e in trace.group_slices],
              "tables.group_slices": [f"[{s}, {e})" for s, e in tables.group_slices]})

# %% [markdown]
# The trace reads each group's slice off the store table itself (the smallest and largest offset of
# its tiles) and refuses a group whose tiles are not contiguous; it agrees with the `group_slices`
# the engine hands to its collectives.
#
# ## 4 · The counting table, tile by tile
#
# Now replay one call. Tiles finish in schedule order; each one bumps its group's counter; a group
# whose counter reaches its target *fires*: its AllReduce runs on its slice while the GEMM goes on.
# (On a GPU the CTAs of one wave finish within a few percent of each other in no fixed order; the
# trace counts CTA 0 first. Only the state at the end of a wave is fixed.)
#
# At the end of each wave the table reads exactly as in the paper notes:
# `[2,0,0]` → G1 fires, `[2,2,0]`, `[2,4,0]` → G2 fires, `[2,4,2]` → G3 fires.

# %%
trace.wave_ends()

# %%
trace.table()

# %% [markdown]
# The same steps drawn (each panel: `C` in its tiles on top, the counting table, the send buffer in
# buffer order with the groups' slices at the bottom). Dashed: not computed yet; pale: stored in the
# buffer and counted; full colour: the group's AllReduce has run. The framed tile is the step's.
# The last panel is the **post-communication reorder**: one gather through `post_table_for(rank)`
# (for an in-place AllReduce the same table as the store) puts every tile back in row-major `C`.

# %%
fig = mech.draw_trace(trace, world_size=W)
ex.stamp(fig, {"gpu": "any (CPU: fo_lib tables + CPU loopback)", "link": f"none ({W} virtual ranks)", "date": "live"},
         f"{grid.describe()}, partition {list(PARTITION)}")
ex.save(fig, "00_mechanism", figures_dir)
plt.show()

# %% [markdown]
# In JupyterLab, step through one panel at a time with the slider, or press play (a headless run
# shows the static figure above). The frames are drawn once, here; the slider only swaps them.

# %%
import ipywidgets as widgets

frames = mech.step_images(trace, world_size=W)
slider = widgets.IntSlider(value=0, min=0, max=len(frames) - 1, description="step")
play = widgets.Play(value=0, min=0, max=len(frames) - 1, interval=1200)
widgets.jslink((play, "value"), (slider, "value"))
view = widgets.Image(value=frames[0], format="png", width=520)
slider.observe(lambda change: setattr(view, "value", frames[change["new"]]), names="value")
widgets.VBox([widgets.HBox([play, slider]), view])

# %% [markdown]
# ## 5 · Checked against the real plan
#
# The trace is a prediction from the tables. Run the plan itself: the CPU executor computes `C`,
# stores each group's tiles through `row_offset` and calls the communicator's AllReduce on that
# group's slice, then post-reorders. The recording communicator keeps, for each collective, the slice
# it was given and the whole send buffer after it. `check_against_run` raises unless every
# collective ran in the fired order, on the trace's slice, and left exactly the buffer the trace
# predicts (groups already reduced hold `W x` their tiles, later slots are still empty), and unless
# the plan's output is the trace's post-reorder of the final buffer.

# %%
import torch

gen = torch.Generator().manual_seed(0)
a = torch.randn(M, K, generator=gen).bfloat16()
b = torch.randn(N, K, generator=gen).bfloat16()       # nn.Linear weight layout: N x K
y, calls = mech.run_recorded(plan, a, b)
C = (a.float() @ b.float().T).bfloat16().double().numpy()   # the GEMM's bf16 output, as the executor rounds it
mech.check_against_run(trace, calls, C, W, y.double().numpy())

# %% [markdown]
# With `W` identical virtual ranks an AllReduce sums `W` equal copies, so the whole call must give
# `W * A @ B.T`, up to the rounding of the bf16 output (8 significant bits: a relative error of a
# few 1e-3):

# %%
from fo_lib.testing import calc_diff

want = W * (a.double() @ b.double().T)
print(f"relative error vs W * A @ B.T in float64: {calc_diff(y.double(), want):.2e}")
assert calc_diff(y.double(), want) < 1e-2

# %% [markdown]
# ## 6 · Why signalling: decomposition and fusion on the same GEMM (Fig. 1, Tab. 1)
#
# Two older ways to overlap a GEMM with its collective:
#
# * **Decomposition** (Async-TP, CoCoNet, Domino, ...): split the GEMM into `k` smaller GEMMs
#   along `M` and run each chunk's collective while the next chunk computes. Any collective works
#   (communication-agnostic), but each small GEMM is its own launch with its own last, partly empty
#   wave, and overlapping at tile granularity means one GEMM per tile.
# * **Fusion** (FLUX, ...): put the communication inside the GEMM kernel, tile by tile. Tile-wise,
#   but the kernel is rewritten and retuned for every collective, and messages are one tile each.
# * **Signalling** (FlashOverlap): the unchanged GEMM, a counter increment per tile, and stock
#   collectives on per-group slices.
#
# The numbers below come from the wave model of `TileGrid` (`mech.design_comparison`): launches,
# waves in all, their mean fill (tiles / (waves x CTAs)), collectives per call and the smallest
# message. The three property columns are the paper's Table 1. First the toy:

# %%
mech.design_comparison(grid, PARTITION, ks=(2, grid.num_tiles))

# %% [markdown]
# On the toy, splitting into 2 GEMMs of one tile row each costs no extra wave (4 tiles = 2 full waves
# each), but a tile-wise decomposition needs 8 one-tile GEMMs: 8 waves half empty instead of 4 full
# ones. The wave count alone cannot show the rest of the interference (a smaller GEMM wants another
# tile config, loses L2 reuse and pays a launch each); it is a lower bound.
#
# The same on the paper's Fig. 3 GEMM (M = 2048, N = K = 8192 in 128 x 256 tiles on 128 SMs:
# 512 tiles, 4 waves), grouped one wave per group:

# %%
from fo_lib.tiling import TileGrid

fig3 = TileGrid.with_ctas(2048, 8192, 128, BM=128, BN=256)
print(fig3.describe())
designs = mech.design_comparison(fig3, (1, 1, 1, 1), ks=(2, 3, 4, 8, 16, fig3.num_tiles))
designs

# %%
fig = mech.draw_designs(designs, fig3.num_waves)
ex.stamp(fig, {"gpu": "any (wave model)", "link": "none", "date": "live"}, fig3.describe())
ex.save(fig, "00_mechanism_designs", figures_dir)
plt.show()

# %% [markdown]
# Decomposition pays wave quantisation whenever `k` does not divide the tile rows evenly into full
# waves (k = 3: 6 waves, k = 8: 8, k = 16: 16), and reaching tile granularity takes 512 one-tile
# GEMMs. Fusion keeps the 4 waves but sends 64 KiB tile messages from inside a kernel written for one
# collective. Signalling keeps the GEMM's 4 waves and one launch, and sends per-group slices with
# whichever collective the layout asks for (notebook 02: AllReduce, ReduceScatter, All-to-All).
#
# **Next.** Notebook 01 measures the wave pattern on a GPU; 02 draws the reorder tables of all three
# primitives; 03-04 search the partition; 05-08 measure the overlap.
