"""The Hopper GEMM's tile configurations (:class:`Sm90Config`, the named :data:`CONFIGS`) and their
shared-memory budget, which ``Sm90Shape`` in ``fo_lib/cuda/gemm_sm90.cuh`` computes the same way:
the operand ring, C staging (whole, or in parts of 128 columns beside a deeper ring), row offsets
and mbarriers. :mod:`fo_lib.gemm.sm90` runs them.

Pure Python: no CUDA needed to import it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .config import MAX_SMEM, GemmError, RasterMixin

@dataclass(frozen=True)
class Sm90Config(RasterMixin):
    """One sm_90a tile configuration: ``128 x BN x 64`` tiles, ``stages`` operand buffers.
    ``order``/``swizzle`` are run-time arguments (no recompile), and so is ``stream_k`` (split the
    partial last wave over every CTA where :func:`stream_k_tiles` says it pays)."""

    BN: int = 256
    stages: int = 3
    order: str = "row"
    swizzle: int = 1
    stream_k: bool = False
    cluster: int = 1
    pingpong: bool = False

    # ``cluster`` (compiled in: 1 or 2 CTAs along M sharing B, see the module's notes) and
    # ``pingpong`` (compiled in: each consumer warpgroup its own tiles, see gemm_sm90.cuh).
    BM: ClassVar[int] = 128  # two consumer warpgroups x wgmma m64
    BK: ClassVar[int] = 64   # one 128-byte swizzle span of 16-bit elements
    threads: ClassVar[int] = 384

    @property
    def smem_bytes(self) -> int:
        """1024 (alignment slack) + operand ring + C staging (``c_cols`` wide) + BM int64 row offsets + mbarriers;
        the same sum as ``Sm90Shape::SMEM_BYTES`` in gemm_sm90.cuh."""
        return self._fixed_bytes + self.BM * c_row_bytes(self.c_cols)

    @property
    def _fixed_bytes(self) -> int:
        return (1024 + self.stages * (self.BM + self.BN) * self.BK * 2 + 8 * self.BM
                + 8 * (2 * self.stages + 2 + 4 * self.pingpong))

    @property
    def c_cols(self) -> int:
        """Columns of C staged at once (``Sm90Shape::C_PART_CHUNKS`` x 8): the whole tile where it fits
        beside the ring, else parts of 128 (the kernel hands one to the store warps before the next)."""
        return self.BN if self._fixed_bytes + self.BM * c_row_bytes(self.BN) <= MAX_SMEM else 128

    @property
    def tile_name(self) -> str:
        """Identifies the compiled specialization (everything but the run-time raster)."""
        return (f"m{self.BM}n{self.BN}k{self.BK}_s{self.stages}" + (f"_c{self.cluster}" if self.cluster > 1 else "")
                + ("_pp" if self.pingpong else ""))

    def validate(self) -> "Sm90Config":
        def bad(msg: str):
            raise GemmError(f"Sm90Config {self.tile_name}: {msg}")

        self._check_fields(("BN", "stages", "swizzle"), bad)
        for flag in ("stream_k", "pingpong"):
            if not isinstance(getattr(self, flag), bool):
                bad(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        if isinstance(self.cluster, bool) or self.cluster not in (1, 2):
            bad(f"cluster must be 1 or 2 CTAs, got {self.cluster!r}")
        if self.pingpong and self.BN > PINGPONG_MAX_BN:  # a whole tile's BN accumulators per consumer thread
            bad(f"ping-pong keeps BN accumulators per thread: BN <= {PINGPONG_MAX_BN}, got {self.BN}")
        if self.cluster > 1 and self.stream_k:
            bad("clusters run whole waves: stream_k must be False")
        if self.BN % 16 or not 128 <= self.BN <= 256:
            bad(f"BN must be a multiple of 16 in [128, 256] (wgmma m64nBN, stmatrix pairs, cluster halves of B), "
                f"got {self.BN}")
        if not 2 <= self.stages <= 8:
            bad(f"stages must be in [2, 8], got {self.stages}")
        if self.pingpong and self.c_cols < self.BN:
            bad("ping-pong stages whole C tiles: fewer stages (its C does not fit beside this ring)")
        if self.smem_bytes > MAX_SMEM:
            bad(f"needs {self.smem_bytes} B of shared memory, more than {MAX_SMEM}")
        return self


def c_row_bytes(cols: int) -> int:
    """Bytes per row of ``cols`` columns of C staging (``Sm90Shape::row_bytes``): 16-byte chunks,
    swizzled where a row holds a multiple of 8 of them, else padded to an odd count (bank-conflict free)."""
    chunks = cols // 8
    return 16 * (chunks if chunks % 8 == 0 else chunks | 1)


def max_stages(BN: int, cap: int = 5) -> int:
    """The deepest operand ring (up to ``cap``) a ``128 x BN x 64`` tile fits in shared memory with
    its whole C tile staged, or 4 with C in parts where the whole tile leaves fewer than that."""
    whole = max(s for s in range(2, cap + 1) if Sm90Config(BN, s).c_cols == BN)
    return whole if whole >= 4 else max(s for s in range(2, 5) if Sm90Config(BN, s).smem_bytes <= MAX_SMEM)


# Tile widths between 128 and 256: a grid whose 128 x 256 tiles leave a partial last wave often fills
# its waves with another width (2048 x 7168: 448 tiles of 128 x 256 are 3.4 waves on 132 SMs, 656 of
# 128 x 176 are 4.97), as cuBLAS does with its 176-, 192- and 208-wide tiles.
MID_WIDTHS = (160, 176, 192, 208, 224, 240)
PINGPONG_MAX_BN = 192  # ping-pong: a whole tile's BN fp32 accumulators per thread, of 232 registers

CONFIGS: dict[str, Sm90Config] = {
    # 4 x 48 KB operand stages + C staged in two 32 KB halves (the whole 64 KB C tile fits beside 3).
    "128x256x64": Sm90Config(256, max_stages(256)),
    # Small N / many tiles: 5 x 32 KB stages + the 32 KB C tile.
    "128x128x64": Sm90Config(128, 5),
    # The same tiles in clusters of 2 along M sharing B (TMA multicast).
    "128x256x64c2": Sm90Config(256, max_stages(256), cluster=2),
    "128x128x64c2": Sm90Config(128, 5, cluster=2),
    # The widths in between, each with the deepest ring that fits (5 stages at 160, 4 at 176-240;
    # C in parts of 128 columns at 224-240), alone and in clusters of 2.
    **{f"128x{bn}x64{c}": Sm90Config(bn, max_stages(bn), cluster=2 if c else 1)
       for bn in MID_WIDTHS for c in ("", "c2")},
    # Ping-pong consumers (cuBLAS's non-cooperative kernels on few-wave shapes), alone and in clusters.
    **{f"128x{bn}x64{c}p": Sm90Config(bn, max_stages(bn), cluster=2 if c else 1, pingpong=True)
       for bn in (128, 176, 192) for c in ("", "c2")},
}
for _c in CONFIGS.values():
    _c.validate()
