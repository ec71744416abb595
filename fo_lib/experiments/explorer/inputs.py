"""The explorer's inputs: one validated :class:`ExplorerInput`, partitions typed by hand."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from ...gemm import DTYPES
from ...predictor import MODELS
from ...profiles import PRIMITIVES
from ...tiling import RASTER_ORDERS
from .errors import MAX_DIM, PARTITION_CHOICES, TILE_CONFIGS, ExplorerError
from .links import DEFAULT_LINK, LinkPreset, presets


@dataclass(frozen=True)
class ExplorerInput:
    """One view of the explorer. ``sm_count``, ``comm_sms`` and ``world_size`` left ``None`` take the
    link preset's (measured: the recorded GPU and the SMs the collective took; modelled: its
    assumptions). ``partition``: ``"tuned"``, ``"finest"``, ``"one group"`` or group sizes typed as
    ``"1,2,2"``."""

    # The default view: Llama-3-70B's attention output projection at TP=8 on 4096 tokens, a recorded
    # shape whose best partition beats the runner-up by 1.5 % (at K = 8192 some 170 tie for best).
    M: int = 4096
    N: int = 8192
    K: int = 1024
    dtype: str = "bf16"
    tile: str = "sm90 128x256x64"
    sm_count: int | None = None
    comm_sms: int | None = None
    order: str = "row"
    swizzle: int = 8
    link: str = DEFAULT_LINK
    primitive: str = "all_reduce"
    world_size: int | None = None
    partition: str = "tuned"
    model: str = "refined"


def _int(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ExplorerError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ExplorerError(f"{name} must be in [{low}, {high}], got {value}")
    return int(value)


def _choice(name: str, value, options) -> str:
    if value not in options:
        raise ExplorerError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def parse_dim(name: str, text) -> int:
    """A GEMM dimension typed in a text box: digits only (spaces and ``_`` separators allowed), in
    ``[1, MAX_DIM]``; anything else raises :class:`ExplorerError` with one line naming ``name``."""
    s = str(text).strip().replace("_", "").replace(" ", "")
    if not re.fullmatch(r"[0-9]+", s):
        raise ExplorerError(f"{name} must be a positive integer, got {str(text).strip()!r}")
    return _int(name, int(s), 1, MAX_DIM)


def parse_partition(text, num_waves: int) -> tuple[str, tuple[int, ...] | None]:
    """``("tuned" | "finest" | "one group" | "typed", groups or None)`` for a partition choice;
    typed group sizes must be positive integers summing to ``num_waves``."""
    if isinstance(text, (tuple, list)):
        text = ",".join(str(g) for g in text)
    if not isinstance(text, str):
        raise ExplorerError(f"partition must be one of {list(PARTITION_CHOICES)} or group sizes such as "
                            f"'1,2,2', got {text!r}")
    s = text.strip().lower()
    if s in PARTITION_CHOICES:
        return s, None
    if s == "one":
        return "one group", None
    body = s.strip("()[] ")
    items = [x for x in re.split(r"[,\s]+", body) if x]
    if not items or not all(x.isdigit() for x in items):
        raise ExplorerError(f"partition {text!r} is neither one of {list(PARTITION_CHOICES)} nor group sizes "
                            f"such as '1,2,2' (positive integers summing to the {num_waves} waves)")
    groups = tuple(int(x) for x in items)
    if any(g < 1 for g in groups):
        raise ExplorerError(f"partition {text!r}: every group needs at least one wave")
    if sum(groups) != num_waves:
        raise ExplorerError(f"partition {text!r} covers {sum(groups)} waves, but this GEMM has {num_waves} "
                            f"waves")
    return "typed", groups


def resolve(inp: ExplorerInput | None = None, **changes) -> tuple[ExplorerInput, LinkPreset]:
    """The input with the preset's defaults filled in, checked field by field."""
    inp = replace(inp or ExplorerInput(), **changes)
    link = _choice("link", inp.link, presets())
    preset = presets()[link]
    prim = _choice("primitive", inp.primitive, PRIMITIVES)
    if prim not in preset.primitives:
        raise ExplorerError(f"link {link!r} has no {prim} curve; it has {list(preset.primitives)}")
    tile = _choice("tile", inp.tile, TILE_CONFIGS)
    if tile.startswith("sm90") and preset.gpu is not None and not preset.gpu.hopper:
        raise ExplorerError(f"tile {tile!r} needs a Hopper GPU, but link {link!r} is a {preset.gpu.name}; "
                            f"pick a 'portable ...' tile")
    sm_count = _int("sm_count", preset.sm_count if inp.sm_count is None else inp.sm_count, 1, 1024)
    comm = _int("comm_sms", preset.default_comm_sms(prim) if inp.comm_sms is None else inp.comm_sms,
                0, sm_count - 1)
    world = preset.world_size if inp.world_size is None else inp.world_size
    world = _int("world_size", world, 2, 1024)
    if preset.measured and world != preset.world_size:
        raise ExplorerError(f"link {link!r} was measured at world size {preset.world_size}, not {world}; "
                            f"use {preset.world_size} or a modelled link")
    K = _int("K", inp.K, 8, MAX_DIM)
    if K % 8:
        raise ExplorerError(f"K must be a multiple of 8 (16-byte operand rows), got {K}")
    return replace(inp, M=_int("M", inp.M, 1, MAX_DIM), N=_int("N", inp.N, 1, MAX_DIM), K=K,
                   dtype=_choice("dtype", inp.dtype, DTYPES), tile=tile, sm_count=sm_count, comm_sms=comm,
                   order=_choice("order", inp.order, RASTER_ORDERS), swizzle=_int("swizzle", inp.swizzle, 1, 64),
                   link=link, primitive=prim, world_size=world,
                   model=_choice("model", inp.model, MODELS)), preset
