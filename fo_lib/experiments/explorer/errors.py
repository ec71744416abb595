"""The explorer's limits, tile configs by name, and its error."""
from __future__ import annotations

from ...gemm import CONFIGS as PORTABLE_CONFIGS
from ...gemm.sm90 import CONFIGS as SM90_CONFIGS

DESIGN_SPACE_MAX_WAVES = 12  # 2^11 = 2048 partitions: evaluated in milliseconds, drawn as one artist
MAX_DIM = 1 << 20            # M, N, K beyond this are typos, not GEMMs
PARTITION_CHOICES = ("tuned", "finest", "one group")
ELEM_BYTES = {"bf16": 2, "f16": 2}

# Tile configs by name: the portable mma.sync kernel's and the Hopper (wgmma + TMA) kernel's.
TILE_CONFIGS = {**{f"sm90 {name}": cfg for name, cfg in SM90_CONFIGS.items()},
                **{f"portable {name}": cfg for name, cfg in PORTABLE_CONFIGS.items()}}


class ExplorerError(ValueError):
    """Input the explorer cannot model; the message names the field and what would work."""

