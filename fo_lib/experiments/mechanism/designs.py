"""Table 1 of the paper on a given GEMM: decomposition (k smaller GEMMs), fusion (communication per
tile inside the GEMM) and signalling, with the wave counts and fills of
:class:`~fo_lib.tiling.TileGrid`."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import reorder
from ...tiling import TileGrid


def decomposed(grid: TileGrid, k: int) -> list[TileGrid]:
    """``grid``'s GEMM decomposed into ``k`` smaller GEMMs along M, as decomposition overlaps do: runs
    of whole tile rows (no padding) while ``k <= tiles_m``; ``k = tiles``: one GEMM per tile (the only
    tile-wise decomposition). Each keeps the tile shape and the CTA count."""
    if not 1 <= k <= grid.tiles_m and k != grid.num_tiles:
        raise ValueError(f"k must be in [1, {grid.tiles_m}] (runs of tile rows) or {grid.num_tiles} (one per tile)")
    if k == grid.num_tiles and k > grid.tiles_m:
        return [TileGrid.with_ctas(int(grid.tile_rows(t)), int(grid.tile_cols(t)), grid.ctas, BM=grid.BM, BN=grid.BN)
                for t in range(grid.num_tiles)]
    runs = np.array_split(np.arange(grid.tiles_m), k)
    out = []
    for r in runs:
        rows = min(grid.M, (r[-1] + 1) * grid.BM) - r[0] * grid.BM
        out.append(TileGrid.with_ctas(int(rows), grid.N, grid.ctas, BM=grid.BM, BN=grid.BN, order=grid.order,
                                      swizzle=grid.swizzle))
    return out


def design_comparison(grid: TileGrid, partition, ks=(2, 4), element_bytes: int = 2) -> pd.DataFrame:
    """Table 1 of the paper on one GEMM, one row per design. Numbers from the wave model of
    :class:`TileGrid`: GEMM launches, waves in all (the whole GEMM's is the floor), the mean fill
    of those waves (tiles / (waves x CTAs)), collectives per call and the smallest message. The
    three property columns are the paper's; the numbers show where they come from: a
    decomposition into ``k`` GEMMs pays each one's last partial wave (and a fresh launch), fusion
    sends tile-sized messages from inside one GEMM kernel written for one collective, signalling
    keeps the GEMM's waves and sends one slice per group with a stock collective."""
    from ...partition import validate_partition

    part = validate_partition(partition, grid.num_waves)
    tile_bytes = grid.BM * grid.BN * element_bytes
    rows = []

    def row(design, launches, waves, tiles, collectives, smallest, tile_wise, free, agnostic):
        rows.append({"design": design, "GEMM launches": launches, "waves": waves,
                     "wave fill": round(tiles / (waves * grid.ctas), 3), "collectives / call": collectives,
                     "smallest message (KiB)": round(smallest / 1024, 1), "tile-wise": tile_wise,
                     "interference-free": free, "communication-agnostic": agnostic})

    for k in ks:
        parts = decomposed(grid, k)
        name = "decomposition, one GEMM per tile" if k == grid.num_tiles > grid.tiles_m else f"decomposition, k={k}"
        smallest = min(p.M * p.N for p in parts) * element_bytes
        row(name, k, sum(p.num_waves for p in parts), sum(p.num_tiles for p in parts), k, smallest,
            "yes" if k == grid.num_tiles else "no", "no", "yes")
    row("fusion (comm per tile in the GEMM)", 1, grid.num_waves, grid.num_tiles, f"{grid.num_tiles} (in-kernel)",
        tile_bytes, "yes", "no", "no")
    sizes = np.diff(reorder.tile_reorder(grid, part).group_slices, axis=1).ravel()
    row(f"signalling, partition {list(part)}", 1, grid.num_waves, grid.num_tiles, len(part),
        int(sizes.min()) * element_bytes, "yes", "yes", "yes")
    return pd.DataFrame(rows)


def draw_designs(designs: pd.DataFrame, whole_waves: int):
    """Two bar charts of :func:`design_comparison` (log scales): the GEMM waves each design runs in
    all (the whole GEMM's ``whole_waves`` is the floor) and its smallest message. Colour: blue
    decomposition, red fusion, green signalling. Returns the figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.6), layout="constrained")
    colors = ["C0" if d.startswith("decomposition") else "C3" if d.startswith("fusion") else "C2"
              for d in designs.design]
    labels = [d.replace("decomposition, ", "decomp. ").replace(" (comm per tile in the GEMM)", "")
              .replace("one GEMM per tile", "per tile") for d in designs.design]
    panels = {"waves": (f"GEMM waves in all (whole GEMM: {whole_waves})", "waves (log scale)"),
              "smallest message (KiB)": ("smallest message (KiB)", "KiB (log scale)")}
    for ax, (col, (title, ylabel)) in zip(axes, panels.items()):
        bars = ax.bar(range(len(designs)), designs[col], color=colors)
        ax.bar_label(bars, [f"{v:g}" for v in designs[col]], fontsize=8)
        ax.set_yscale("log")
        ax.set_ylim(1, designs[col].max() * 4)
        ax.set_xticks(range(len(designs)), labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.set_title(title, fontsize=10)
    return fig
