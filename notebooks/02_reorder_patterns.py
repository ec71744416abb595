# %% [markdown]
# # 02 · Reorder patterns
#
# **Reproduces:** Fig. 7 (pre- and post-communication reorder: tile for AllReduce, subtile for
# ReduceScatter, subtoken for All-to-All).
#
# **Paper (§3.3).** Tiles finish in wave order, not row-major order, so the GEMM epilogue writes each
# tile into a *contiguous* slice per wave group (pre-communication reorder), and a post-reorder puts
# them back. The unit is the tile for AllReduce, a *subtile* (W row-slices of a tile) for
# ReduceScatter, a *subtoken* (rows grouped by destination) for All-to-All.
#
# **Here.** Drawn from the real mapping tables of `fo_lib.reorder` (pure Python, always live): the
# colour is the buffer position of every output element.

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
import numpy as np
from fo_lib import reorder
from fo_lib.tiling import TileGrid
grid = TileGrid(512, 768, BM=64, BN=64, order="row", swizzle=2, sm_count=10)
part = (1, 2, grid.num_waves - 3) if grid.num_waves > 3 else (grid.num_waves,)
W = 4
ar = reorder.tile_reorder(grid, part)
rs = reorder.subtile_reorder(grid, part, W)
rng = np.random.default_rng(0)
dest = [rng.integers(0, W, grid.M) for _ in range(W)]
print(grid.describe(), "partition", part)

# %%
from fo_lib.engine import Routing
routing = Routing.from_destinations(dest)
a2a = reorder.subtoken_reorder(grid, part, routing.dest, routing.dst_index, 0)
fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
for ax, (name, plan) in zip(axes, [("AllReduce: whole tiles", ar), ("ReduceScatter: subtiles (W = 4)", rs),
                                   ("All-to-All: subtokens (W = 4)", a2a)]):
    idx = reorder.element_index(plan.row_offset, grid.N, grid.BN)
    im = ax.imshow(idx / 1000, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set(title=name, xlabel="output column", ylabel="output row")
# One scale for the three panels: each buffer holds the same M x N elements.
fig.colorbar(im, ax=axes, label="position in the communication buffer (thousands of elements)")
fig.suptitle("Where each output element lands in the buffer the collective sends, group by group", fontsize=11)
ex.stamp(fig, {"gpu": "any (tables only)", "link": "none", "date": "live"}, f"partition {list(part)}")
ex.save(fig, "02_reorder_patterns", figures_dir)

# %% [markdown]
# Group slices are contiguous and every element lands exactly once (property-tested in `tests/test_reorder.py`):

# %%
pd.DataFrame({"group": range(len(part)), "waves": part, "tiles": ar.group_tiles, "AR slice": [tuple(s) for s in ar.group_slices], "RS chunk per rank": rs.chunk_elements})
