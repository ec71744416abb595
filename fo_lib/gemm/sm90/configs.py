"""The Hopper GEMM's tile configurations: :class:`Sm90Config` (one compiled specialization plus its
run-time raster) and :data:`CONFIGS`, the named ones the tile table records and the picker weighs.
The sums here are ``Sm90Shape``'s in ``fo_lib/cuda/sm90_shape.cuh`` (a test compiles both).

Pure: no torch, no CuPy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..config import MAX_SMEM, GemmError, RasterMixin

@dataclass(frozen=True)
class Sm90Config(RasterMixin):
    """One sm_90a tile configuration: ``128 x BN x 64`` tiles, ``stages`` operand buffers.
    ``order``/``swizzle`` are run-time arguments (no recompile). ``stream_k`` (split the partial last
    wave over every CTA where :func:`fo_lib.gemm.stream_k.stream_k_plan` says it pays) is compiled in: a
    kernel without the tail's code keeps its k-loop on the uniform datapath (:attr:`kernel_id`)."""

    BN: int = 256
    stages: int = 3
    order: str = "row"
    swizzle: int = 1
    stream_k: bool = False
    cluster: int = 1
    pingpong: bool = False
    direct_c: bool = False

    # Compiled in: ``cluster`` (1 or 2 CTAs sharing the B or A tile they have in common, see fo_lib.gemm.sm90), ``pingpong``
    # (each consumer warpgroup its own tiles) and ``direct_c`` (ping-pong consumers store C themselves
    # through small per-warp buffers instead of a whole C tile: room for a 5th stage at 168-176).
    BM: ClassVar[int] = 128  # two consumer warpgroups x wgmma m64
    BK: ClassVar[int] = 64   # one 128-byte swizzle span of 16-bit elements
    threads: ClassVar[int] = 384

    @property
    def smem_bytes(self) -> int:
        """1024 (alignment slack) + operand ring + C staging tile (``direct_c``: the consumer warps'
        buffers) + BM int64 row offsets + mbarriers;
        the same sum as ``Sm90Shape::SMEM_BYTES`` in sm90_shape.cuh."""
        c_bytes = DIRECT_C_BYTES if self.direct_c else self.BM * c_row_bytes(self.BN)
        return (1024 + self.stages * (self.BM + self.BN) * self.BK * 2 + c_bytes
                + 8 * self.BM + 8 * (2 * self.stages + 2 + 4 * self.pingpong))

    @property
    def kernel_id(self) -> str:
        """The compiled kernel's name part: the tile name, ``_sk`` where the stream-K tail is compiled in."""
        return self.tile_name + ("_sk" if self.stream_k else "")

    @property
    def tile_name(self) -> str:
        """Identifies the tiles (everything but the raster and the stream-K tail): the tile table's key."""
        return (f"m{self.BM}n{self.BN}k{self.BK}_s{self.stages}" + (f"_c{self.cluster}" if self.cluster > 1 else "")
                + ("_pp" if self.pingpong else "") + ("_dc" if self.direct_c else ""))

    def validate(self) -> "Sm90Config":
        def bad(msg: str):
            raise GemmError(f"Sm90Config {self.tile_name}: {msg}")

        self._check_fields(("BN", "stages", "swizzle"), bad)
        for flag in ("stream_k", "pingpong", "direct_c"):
            if not isinstance(getattr(self, flag), bool):
                bad(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        if isinstance(self.cluster, bool) or self.cluster not in (1, 2):
            bad(f"cluster must be 1 or 2 CTAs, got {self.cluster!r}")
        if self.pingpong and self.BN > PINGPONG_MAX_BN:  # a whole tile's BN accumulators per consumer thread
            bad(f"ping-pong keeps BN accumulators per thread: BN <= {PINGPONG_MAX_BN}, got {self.BN}")
        if self.cluster > 1 and self.stream_k:
            bad("clusters run whole waves: stream_k must be False")
        if self.BN % 8 or not 128 <= self.BN <= 256:
            bad(f"BN must be a multiple of 8 in [128, 256] (wgmma m64nBN, whole swizzle atoms of B), got {self.BN}")
        if self.pingpong and self.direct_c and self.cluster > 1:
            bad("ping-pong consumers that store C themselves run single CTAs: cluster must be 1")
        if self.BN % 16 and self.cluster > 1:
            bad(f"clusters multicast halves of B: BN a multiple of 16, got {self.BN}")
        if not 2 <= self.stages <= 8:
            bad(f"stages must be in [2, 8], got {self.stages}")
        if self.smem_bytes > MAX_SMEM:
            bad(f"needs {self.smem_bytes} B of shared memory, more than {MAX_SMEM}")
        if self.direct_c and not self.pingpong:  # docs/decisions.md, "Only ping-pong consumers store C themselves"
            bad("only ping-pong consumers store C themselves: direct_c needs pingpong=True")
        return self


def c_row_bytes(BN: int) -> int:
    """Bytes per row of the C staging tile (``Sm90Shape::C_ROW_BYTES``): 16-byte chunks, swizzled
    where a row holds a multiple of 8 of them, else padded to an odd count (bank-conflict free)."""
    chunks = BN // 8
    return 16 * (chunks if chunks % 8 == 0 else chunks | 1)


def max_stages(BN: int, cap: int = 5, direct_c: bool = False, pingpong: bool = False) -> int:
    """The deepest operand ring (up to ``cap``) a ``128 x BN x 64`` tile fits in shared memory."""
    return max(s for s in range(2, cap + 1)
               if Sm90Config(BN, s, direct_c=direct_c, pingpong=pingpong).smem_bytes <= MAX_SMEM)


# Tile widths between 128 and 256: a grid whose 128 x 256 tiles leave a partial last wave often fills
# its waves with another width (2048 x 7168: 448 tiles of 128 x 256 are 3.4 waves on 132 SMs, 656 of
# 128 x 176 are 4.97), as cuBLAS does with its 176-, 192- and 208-wide tiles.
MID_WIDTHS = (160, 176, 192, 208, 224, 240)
# Widths of an odd count of 8-column blocks (no clusters: their halves of B need 16): where the
# 16-column steps leave a last wave short. 1536 x 3584 on 132 SMs: 252 tiles of 128 x 176 (1.91 waves,
# 2 to run), 264 of 128 x 168 (2 whole waves, each 4.5 % shorter), cuBLAS's tile there.
ODD_WIDTHS = (168,)
PINGPONG_DIRECT_WIDTHS = (168, 176)
PINGPONG_MAX_BN = 192  # ping-pong: a whole tile's BN fp32 accumulators per thread, of 232 registers
DIRECT_C_BYTES = 8 * 2 * 16 * 128  # direct_c: two 16 x 64 16-bit buffers per consumer warp
# Configs a tile table recorded before they were removed: their rows are skipped when a table is
# read (fo_lib.gemm.tile_table.load), any other unknown name is an error. The cooperative direct-C
# configs were never picked (docs/decisions.md, "Only ping-pong consumers store C themselves").
RETIRED_CONFIGS = tuple(f"128x{bn}x64{c}d" for bn in (224, 240, 256) for c in ("", "c2"))

CONFIGS: dict[str, Sm90Config] = {
    # 3 x 48 KB operand stages + the 64 KB C tile: the most that fits 227 KB.
    "128x256x64": Sm90Config(256, 3),
    # Small N / many tiles: 5 x 32 KB stages + the 32 KB C tile.
    "128x128x64": Sm90Config(128, 5),
    # The same tiles in clusters of 2 sharing B or A (TMA multicast).
    "128x256x64c2": Sm90Config(256, 3, cluster=2),
    "128x128x64c2": Sm90Config(128, 5, cluster=2),
    # The widths in between, each with the deepest ring that fits (5 stages at 160, 4 at 176-208,
    # 3 at 224-240), alone and in clusters of 2.
    **{f"128x{bn}x64{c}": Sm90Config(bn, max_stages(bn), cluster=2 if c else 1)
       for bn in MID_WIDTHS for c in ("", "c2")},
    # Ping-pong consumers (cuBLAS's non-cooperative kernels on few-wave shapes), alone and in clusters.
    **{f"128x{bn}x64{c}p": Sm90Config(bn, max_stages(bn), cluster=2 if c else 1, pingpong=True)
       for bn in (128, 176, 192) for c in ("", "c2")},
    # The odd widths, cooperative and ping-pong, single CTAs.
    **{f"128x{bn}x64{p}": Sm90Config(bn, max_stages(bn), pingpong=bool(p)) for bn in ODD_WIDTHS for p in ("", "p")},
    # Ping-pong consumers that store C themselves, under the other warpgroup's MMAs: 5 stages where the
    # C tile left 4 (cuBLAS's non-cooperative 168- and 176-wide kernels run 5).
    **{f"128x{bn}x64pd": Sm90Config(bn, max_stages(bn, direct_c=True, pingpong=True), pingpong=True, direct_c=True)
       for bn in PINGPONG_DIRECT_WIDTHS},
}
for _c in CONFIGS.values():
    _c.validate()


def config_label(cfg: Sm90Config) -> str:
    """``128x256x64/row8`` (``+sk`` with a stream-K tail): the CONFIGS name, raster order, swizzle."""
    name = next((n for n, c in CONFIGS.items() if c.tile_name == cfg.tile_name), cfg.tile_name)
    return f"{name}/{cfg.order}{cfg.swizzle}" + ("+sk" if cfg.stream_k else "")
