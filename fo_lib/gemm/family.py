"""The host side both GEMM kernel families share: :class:`GemmFamily`."""
from __future__ import annotations

from .._util import ceil_div
from ..jit import LaunchMemo, PreparedLaunch, get_kernel, memo_key
from ..tiling import RASTER_ORDERS
from .checks import check_table_store, is_matrix, output
from .config import GemmError


class GemmFamily:
    """The public calls of one GEMM kernel family, written once for the portable and the Hopper
    kernels. A family supplies its operand check (``check(a, b, config, ctas)`` -> ``(dtype, M, N, K,
    cfg, ctas)``), its source generator, and the leading kernel arguments that differ between
    families (``operand_args(cfg, dtype, a, b, c_ptr, ldc)``: pointers and strides, or TMA maps); the
    rest of the argument list, the kernel cache and the launch are shared.

    Launches are memoized (:class:`fo_lib.jit.LaunchMemo`, keyed by the tensors' signatures,
    the config and ``ctas``): a repeated call (a hot loop, an engine plan's GEMM) skips the checks and
    the argument packing."""

    def __init__(self, check, generate, operand_args, *, place_store: bool = True, kernel_of=None,
                 tail_args=None):
        self.check, self.generate, self.operand_args = check, generate, operand_args
        # Trailing kernel arguments of one family only (``tail_args(cfg, a, b, grid)`` -> ``(args,
        # keep, run_cfg)``: the Hopper kernel's stream-K workspace, which the launch keeps alive, and
        # the config whose kernel runs the launch: without a tail, the one without the tail's code).
        self.tail_args = tail_args
        # The instantiation that runs a store mode (the portable kernel shares one between two).
        self.kernel_of = kernel_of or (lambda epilogue: epilogue)
        # Whether the engine should store tile blocks through tile places (``signal_tiles``) rather
        # than the row table: whichever measured cheaper for the family (docs/decisions.md,
        # "Tile places on the portable kernel, the row table on the Hopper kernel").
        self.place_store = place_store
        self._kernels: dict[tuple[str, str, str, int], object] = {}
        self._memo = LaunchMemo()

    def kernel(self, cfg, dtype: str, epilogue: str, device_index: int):
        """The compiled kernel of ``(cfg, dtype, epilogue)`` on a device (compiled once)."""
        import cupy

        key = (cfg.kernel_id, dtype, self.kernel_of(epilogue), device_index)
        kernel = self._kernels.get(key)
        if kernel is None:
            with cupy.cuda.Device(device_index):
                src, name = self.generate(cfg, dtype, epilogue)
                kernel = get_kernel(src, name)
                if cfg.smem_bytes > 48 * 1024:
                    kernel.max_dynamic_shared_size_bytes = cfg.smem_bytes
            self._kernels[key] = kernel
        return kernel

    def prepare(self, cfg, dtype: str, epilogue: str, a, b, c_ptr: int, ldc: int, ctas: int,
                comm_ptr: int = 0, row_offset_ptr: int = 0, tile_group_ptr: int = 0, counter_ptr: int = 0,
                probe_ptr: int = 0):
        """The launch of checked operands, packed (:class:`fo_lib.jit.PreparedLaunch`)."""
        import numpy as np

        M, N = a.shape[0], b.shape[0]
        dev = a.device.index
        grid = cfg.launch_ctas(ceil_div(M, cfg.BM) * ceil_div(N, cfg.BN), ctas)
        u64, i32 = np.uint64, np.int32
        args = (*self.operand_args(cfg, dtype, a, b, c_ptr, ldc), i32(RASTER_ORDERS.index(cfg.order)),
                i32(cfg.swizzle), u64(comm_ptr), u64(row_offset_ptr), u64(tile_group_ptr), u64(counter_ptr),
                u64(probe_ptr))
        keep, run_cfg = (), cfg
        if self.tail_args is not None:
            tail, keep, run_cfg = self.tail_args(cfg, a, b, grid)
            args += tuple(tail)
        return PreparedLaunch(self.kernel(run_cfg, dtype, epilogue, dev), (grid,), (cfg.threads,), args,
                              device_index=dev, shared_mem=cfg.smem_bytes, keep=keep)

    def gemm_nt(self, a, b, out=None, *, config=None, ctas: int | None = None, stream=None):
        """``out = a @ b.T`` (``a``: M x K, ``b``: N x K); returns ``out``."""
        if out is None and is_matrix(a) and is_matrix(b):
            import torch
            out = torch.empty(a.shape[0], b.shape[0], dtype=a.dtype, device=a.device)

        def build():
            dtype, M, N, K, cfg, n = self.check(a, b, config, ctas)
            o = output(out, M, N, a)
            return self.prepare(cfg, dtype, "plain", a, b, o.data_ptr(), o.stride(0), n)

        self._memo.get_or_build(memo_key(("plain", config, ctas), a, b, out), build)(stream)
        return out

    def gemm_nt_signal(self, a, b, comm_buf, row_offset, tile_group, group_counter, *, config,
                       ctas: int | None = None, stream=None, tile_place=None) -> None:
        """``a @ b.T`` stored through the row table into ``comm_buf``, signalling a counter per tile
        group.

        Element ``C[i, tn * BN + c]`` (``c < min(BN, N - tn * BN)``) goes to
        ``comm_buf.flatten()[row_offset[i, tn] + c]``; after a tile is stored,
        ``group_counter[tile_group[tile_id]] += 1`` (release, gpu scope). Counters are never reset.
        ``row_offset=None`` stores ``C`` row-major into ``comm_buf`` (the "rows" layout of
        :func:`fo_lib.reorder.row_reorder`: no table is read), or, with ``tile_place`` (int64
        ``[tiles, 4]``, :attr:`fo_lib.reorder.TileReorder.tile_place`), each tile at its place: row
        ``r`` of tile ``t`` at ``base + (r >> shift) * sub_stride + (r & (2^shift - 1)) * cols`` for
        ``tile_place[t] = (base, sub_stride, shift, 0)`` (``0 <= shift <= 30``), the tile and subtile
        layouts without a row table. Like ``row_offset``, its contents are trusted (dtype, shape and
        alignment are checked, not the addresses it makes): build it with :mod:`fo_lib.reorder`.
        ``config`` is required: the tables depend on its tile shape. Always whole waves (a stream-K
        config runs without its tail here: the groups a counter counts are whole waves).
        """
        if config is None:
            raise GemmError("gemm_nt_signal needs an explicit config (the tables are built for its tiles)")
        config = config.whole_waves()
        if tile_place is not None and row_offset is not None:
            raise GemmError("pass a row table (row_offset) or tile places (tile_place), not both")

        def build():
            dtype, M, N, K, cfg, n = self.check(a, b, config, ctas)
            check_table_store(a, comm_buf, row_offset, tile_group, group_counter, cfg, M, N, tile_place)
            if tile_place is not None:
                return self.prepare(cfg, dtype, "signal_tiles", a, b, 0, 0, n, comm_ptr=comm_buf.data_ptr(),
                                    row_offset_ptr=tile_place.data_ptr(), tile_group_ptr=tile_group.data_ptr(),
                                    counter_ptr=group_counter.data_ptr())
            if row_offset is None:
                return self.prepare(cfg, dtype, "signal_rows", a, b, comm_buf.data_ptr(), N, n,
                                    tile_group_ptr=tile_group.data_ptr(), counter_ptr=group_counter.data_ptr())
            return self.prepare(cfg, dtype, "signal", a, b, 0, 0, n, comm_ptr=comm_buf.data_ptr(),
                                row_offset_ptr=row_offset.data_ptr(), tile_group_ptr=tile_group.data_ptr(),
                                counter_ptr=group_counter.data_ptr())

        key = memo_key(("signal", config, ctas), a, b, comm_buf, row_offset, tile_group, group_counter,
                               tile_place)
        self._memo.get_or_build(key, build)(stream)

    def gemm_nt_scatter(self, a, b, comm_buf, row_offset, *, config, ctas: int | None = None,
                        stream=None) -> None:
        """``a @ b.T`` stored through the row table into ``comm_buf`` with no signal: the
        pre-communication reorder alone (non-overlapped runs; the signal-cost ablation). Whole waves,
        as :meth:`gemm_nt_signal`."""
        if config is None:
            raise GemmError("gemm_nt_scatter needs an explicit config (the table is built for its tiles)")
        config = config.whole_waves()
        if row_offset is None:
            raise GemmError("gemm_nt_scatter stores through a row table: row_offset is required")

        def build():
            dtype, M, N, K, cfg, n = self.check(a, b, config, ctas)
            check_table_store(a, comm_buf, row_offset, None, None, cfg, M, N)
            return self.prepare(cfg, dtype, "scatter", a, b, 0, 0, n, comm_ptr=comm_buf.data_ptr(),
                                row_offset_ptr=row_offset.data_ptr())

        self._memo.get_or_build(memo_key(("scatter", config, ctas), a, b, comm_buf, row_offset), build)(stream)

    def gemm_nt_probe(self, a, b, out=None, *, config, ctas: int | None = None, stream=None):
        """``a @ b.T`` plus a per-tile probe: returns ``(out, probe)``, ``probe`` int64 ``[tiles, 4]``
        = (start globaltimer ns, end ns, smid, CTA index), indexed by row-major tile id. Always whole
        waves (a stream-K config runs without its tail here)."""
        import torch
        if config is None:
            raise GemmError("gemm_nt_probe needs an explicit config")
        config = config.whole_waves()  # the probe times waves
        dtype, M, N, K, cfg, ctas = self.check(a, b, config, ctas)
        out = output(out, M, N, a)
        probe = torch.zeros(ceil_div(M, cfg.BM) * ceil_div(N, cfg.BN), 4, dtype=torch.int64, device=a.device)
        self.prepare(cfg, dtype, "probe", a, b, out.data_ptr(), out.stride(0), ctas,
                     probe_ptr=probe.data_ptr())(stream)
        return out, probe
