"""The Hopper GEMM ``C = A @ B^T`` (sm_90a: TMA + wgmma, warp-specialized, persistent) and its
FlashOverlap epilogues (host side). Same public API and epilogue semantics as
:mod:`fo_lib.gemm.portable`.

Device code: ``fo_lib/cuda/gemm_sm90.cuh``, the kernel, composes its roles, each a header of its own:
``sm90_scheduler.cuh`` (the units each CTA runs, the stream-K tail), ``sm90_producer.cuh`` (TMA),
``sm90_mainloop.cuh`` (wgmma), ``sm90_fixup.cuh`` (a cut tile's parts), ``sm90_epilogue.cuh`` (C
staging, stores, publication) with the epilogue policies of both families (``epilogue.cuh``),
``sm90_shape.cuh`` and ``sm90_ptx.cuh``. The tile schedule is ``fo_lib/cuda/tile_schedule.cuh``,
shared with the portable kernel, so :class:`fo_lib.tiling.TileGrid` predicts the waves of both.

* ``A`` is ``M x K`` row-major, ``B`` is the ``nn.Linear`` weight ``N x K`` row-major ("NT"); bf16 or
  fp16, fp32 accumulation, output in the input type. Needs a compute capability 9.0 GPU.
* Operands are read by TMA through 2-D tensor maps (:mod:`fo_lib.gemm.tma`, cached). TMA
  fills everything outside ``M x K`` / ``N x K`` with zeros, so ``M``, ``N`` and ``K`` tails need no
  special case. ``K`` must still be a multiple of 8 (and row strides too): a tensor map's row stride
  must be a multiple of 16 bytes. Operands must be 16-byte aligned.
* Tile ``128 x BN x 64`` (``BN`` a multiple of 8 in [128, 256], of 16 in clusters), 384 threads: one producer warpgroup (a TMA warp and
  three store warps) and two consumer warpgroups (64 rows each). ``stages`` is the depth of the
  operand ring. Run-time raster (``order``, ``swizzle``) and CTA count (``ctas``) as in
  fo_lib.gemm.portable.
* Epilogues: ``plain`` stores ``C``; ``signal`` stores row ``i`` of tile column ``tn`` at
  ``comm_buf[row_offset[i, tn] + c]`` then adds 1 to ``group_counter[tile_group[tile_id]]`` (release,
  gpu scope, never reset); ``signal_rows`` stores ``C`` row-major into ``comm_buf`` and
  ``signal_tiles`` each tile at its place (fo_lib.gemm.portable), both signalling the same way;
  ``probe`` stores ``C`` and records per tile ``(start ns, end ns, smid, cta)``; ``scatter`` is
  ``signal`` without the counter. The stores, the release and the probe's end stamp are done by the
  store warps after the consumers hand the tile over in shared memory (``direct_c`` configs: the
  consumers store the tile themselves, the store warps publish it), so a tile's probe interval
  may overlap the next tile's start on the same CTA (start = the consumers begin the tile's main
  loop, end = the tile is in global memory: the moment the signal is sent).
* Clusters (``Sm90Config.cluster = 2``, the ``...c2`` configs): CTA pairs run schedule indices
  2 i and 2 i + 1 in step and, where both tiles lie in one tile column (one tile row), load half of
  the shared B (A) tile each by TMA multicast. ``ctas`` must be even; no stream-K tail; the schedule (and so
  the wave model) is that of single CTAs. :func:`.launch.cluster_capacity` is the driver's count of
  clusters that fit at once (66 of 2 on an H200).
* Stream-K tail (``Sm90Config.stream_k``): when the last wave would leave at least
  :data:`~fo_lib.gemm.stream_k.STREAM_K_MIN_IDLE` of the GEMM's CTA time idle, it is shared by more
  CTAs (:func:`fo_lib.gemm.stream_k.stream_k_plan`). Where it has at most half as many tiles as CTAs,
  each of its tiles runs as 2-4 equal k ranges side by side (the split tail: the last range adds the
  others from the workspace and runs the epilogue). Otherwise the last partial wave and one full
  wave before it are spread over every CTA as equal runs of k-blocks
  (:func:`fo_lib.gemm.stream_k.stream_k_tiles`). The kernel also takes runs of unequal length that
  even out the CTAs' costs where the last tile row of a cooperative config holds at most 64 rows of
  M (its second warpgroup has no rows and skips its MMAs there;
  :func:`.stream_k_tail.stream_k_schedule`), planned only where such a tile weighs less than a whole
  one (:data:`.stream_k_tail.IDLE_WARPGROUP_TILE_COST`, a whole tile on the H200). A tile cut
  between two CTAs is summed in fp32 through a workspace (two ``BM x BN`` float slots per CTA: 35 MB
  for 128 x 256 on 132 CTAs) by the CTA that holds its last k-block, which then runs the tile's
  epilogue as usual (who waits on whom: sm90_scheduler.cuh, sm90_fixup.cuh, docs/design-notes.md). Each
  memoized launch owns its workspace; a launch first built inside a CUDA-graph capture runs whole
  waves (its flags could not be zeroed before an eager call), and so do the probe (it times waves),
  the signal and the scatter (the engine's groups are whole waves): only the plain store has a tail.
  Off in the configs the overlap engine runs (its wave model counts whole waves):
  :func:`fo_lib.gemm.auto_config` picks in whole waves, :func:`default_config` (a plain ``gemm_nt``)
  takes the tail where the tile table predicts it pays.
* Autotuning (:mod:`fo_lib.gemm.config_tuning`): a plain ``gemm_nt`` without a config, on the SM
  count's CTAs, runs the fastest of the tile table's shortlist for its shape (the model's pick among
  them: :func:`.config_tuning.tuning_candidates`), timed on its operands on the shape's first call
  and remembered on disk for later calls and processes; :func:`config_for` says which.
  ``FO_SM90_AUTOTUNE=0``: the table's pick, untimed.

``import fo_lib.gemm.sm90`` needs neither torch, CuPy nor cuda-bindings; they are imported at launch.

Modules, each importing only those before it: :mod:`.configs` (:class:`Sm90Config`, :data:`CONFIGS`),
:mod:`.source` (the kernel sources), :mod:`.pick` (the tile table's pick, :func:`default_config`),
:mod:`.stream_k_tail` (a launch's stream-K plan and workspace), :mod:`.config_tuning` (what
autotuning times and weighs), :mod:`.launch` (the public calls and the config a plain call runs).
This package re-exports their public names; the module-level settings read at call time
(``stream_k_tail.IDLE_WARPGROUP_TILE_COST``, ``config_tuning.ONE_WAVE_RASTERS``) are set on their
own modules.
"""
from __future__ import annotations

from ..._util import sm_count
from ..config import GemmError
from ..tma import tma_desc_fields
from .config_tuning import (kernel_digest, one_wave, tuning_candidates, tuning_handicap, tuning_pick,
                            tuning_settle_s)
from .configs import (CONFIGS, MID_WIDTHS, ODD_WIDTHS, PINGPONG_DIRECT_WIDTHS, RETIRED_CONFIGS, Sm90Config,
                      c_row_bytes, config_label)
from .launch import (SM90, TuningRun, cluster_capacity, config_for, gemm_nt, gemm_nt_probe, gemm_nt_scatter,
                     gemm_nt_signal, idle_warpgroup_tile_cost, is_supported, time_candidates, tuning_runs)
from .pick import CANDIDATES, candidate_pool, default_config, guess_config, load_table, predict_ms
from .source import (ARCH, code_path, compile_check_sources, compiled_variants, generate_source, kernel_name,
                     variant_epilogues)
from .stream_k_tail import stream_k_schedule

__all__ = ["ARCH", "CANDIDATES", "CONFIGS", "GemmError", "MID_WIDTHS", "ODD_WIDTHS", "PINGPONG_DIRECT_WIDTHS",
           "RETIRED_CONFIGS", "SM90",
           "Sm90Config", "TuningRun", "c_row_bytes", "candidate_pool", "cluster_capacity", "code_path", "compile_check_sources",
           "compiled_variants", "config_for", "config_label", "default_config", "gemm_nt", "gemm_nt_probe",
           "gemm_nt_scatter", "gemm_nt_signal", "generate_source", "guess_config", "idle_warpgroup_tile_cost",
           "is_supported", "kernel_digest", "kernel_name", "load_table", "one_wave", "predict_ms", "sm_count",
           "stream_k_schedule",
           "time_candidates", "tma_desc_fields", "tuning_candidates", "tuning_handicap", "tuning_pick", "tuning_runs",
           "tuning_settle_s", "variant_epilogues"]
