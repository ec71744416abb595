// Portable tensor-core GEMM, C = A @ B^T ("NT"), with the FlashOverlap epilogues: the kernel,
// composed of its roles (docs/decisions.md, "The Hopper kernel is composed of headers by role": the
// same split, and the same rule for handing the kernel's locals to a role).
//
//   A: M x K row-major (lda), B: N x K row-major (ldb, the nn.Linear weight), C: M x N row-major (ldc).
//   bf16 or fp16 in, fp32 accumulation, same 16-bit type out. Runs on sm_80 / 86 / 89 / 90.
//
// Structure (one CTA per SM, persistent):
//   * CTA b of P walks schedule indices s = b, b + P, ... and maps each to a tile with
//     fo::TileRaster, so tile s runs in wave s / P: the wave model of fo_lib.tiling holds exactly.
//   * Producer (mma_producer.cuh): a cp.async cursor over the CTA's (tile, k-tile) stream into a
//     STAGES-deep ring, running across tile boundaries.
//   * Main loop (mma_mainloop.cuh): mma.sync.m16n8k16, operands fetched with ldmatrix.x4 from the
//     ring, fragments double-buffered across the k16 steps, one __syncthreads per k-tile.
//   * Epilogue (mma_epilogue.cuh): accumulators -> a separate smem C tile -> 16-byte coalesced
//     global stores where the policy Epi (epilogue.cuh) says: Plain, Signal, Probe, Scatter or
//     SignalStore, the same names and meanings as the Hopper kernel's (gemm_sm90.cuh).
//   * The signal: thread 0 releases a finished tile's group counter from the producer's
//     once-per-tile branch, one k-tile into the CTA's next tile (docs/decisions.md, "The portable
//     kernel releases a tile one k-tile into its next tile").
//   * Shapes and PTX wrappers: mma_shape.cuh, mma_ptx.cuh.
//
// NOTES: the roles take the kernel's locals as the one-function kernel used them (the cursor through
// closures of the kernel, the rest by value) and the locals keep their order of declaration: both
// decide the order in which the compiler promotes them to registers, and with it ptxas' allocation
// (scripts/tooling/kernel_hashes.py tells whether an edit changed a binary).
#pragma once

#include "mma_epilogue.cuh"
#include "mma_mainloop.cuh"
#include "mma_producer.cuh"

// Signal epilogues: the k-tile of the CTA's next tile after which a finished tile's counter is
// released (see gemm_nt_body). A compile-time option for experiments (FO_NVRTC_OPTIONS).
#ifndef FO_SIGNAL_RELEASE_KTILE
#define FO_SIGNAL_RELEASE_KTILE 1
#endif

namespace fo {

// Epi: the epilogue policy (epilogue.cuh): Plain, Signal, Probe, Scatter or SignalStore (the rows
// layout with row_offset null, the communication buffer passed as C; else each tile at its place,
// row_offset pointing to the places). Pointers an epilogue does not use may be null.
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, class T, class Epi>
__device__ __forceinline__ void gemm_nt_body(const bits16* __restrict__ A, const bits16* __restrict__ B,
                                             bits16* __restrict__ C, int M, int N, int K, i64 lda, i64 ldb,
                                             i64 ldc, int order, int swizzle, bits16* __restrict__ comm_buf,
                                             const i64* __restrict__ row_offset,
                                             const int* __restrict__ tile_group, u32* group_counter,
                                             u64* __restrict__ probe) {
    using S = GemmShape<BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
    using namespace mma_detail;
    static_assert(!Epi::kPlaces && (Epi::kRowTable || Epi::kRowsOrPlaces || !Epi::kSignal),
                  "the portable kernel stores SignalRows and SignalTiles in one kernel: SignalStore");
    constexpr bool kTableStore = Epi::kRowTable;
    constexpr bool kSignal = Epi::kSignal;
    // SignalStore: C row-major (ldc) into the communication buffer, or, when row_offset holds tile
    // places, each tile at its place: chosen per launch. NOTES: one kernel for both, because compiled
    // as two their k-loops were scheduled unlike plain's and ran slower; as one, the loop is plain's
    // (docs/decisions.md, "The signal's two plain-layout stores are one kernel; plain keeps its own").
    const bool placed = Epi::kRowsOrPlaces && row_offset != nullptr;

    extern __shared__ __align__(128) unsigned char fo_gemm_smem[];
    const u32 smem = smem_addr(fo_gemm_smem);
    const u32 smem_c = smem + STAGES * S::STAGE_BYTES;
    const u32 smem_ro = smem_c + S::C_BYTES;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int wm = warp / WARPS_N;  // warp row in the CTA tile
    const int wn = warp % WARPS_N;

    const int tiles_m = (M + BM - 1) / BM;
    const int tiles_n = (N + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n;
    const TileRaster raster(tiles_m, tiles_n, order, swizzle);  // schedule index -> tile
    const int KT = (K + BK - 1) / BK;

    // --- the cp.async producer's cursor over this CTA's (tile, k-tile) stream (mma_producer.cuh) -----
    const int ld_row0 = tid / S::CPR;
    const int ld_chunk = tid % S::CPR;
    const u32 ld_dst = ld_row0 * (BK * 2) + operand_swizzle<BK>(ld_row0, ld_chunk) * 16;
    const i64 a_row_step = i64(S::ROW_STEP) * lda;  // elements between one thread's A rows
    const i64 b_row_step = i64(S::ROW_STEP) * ldb;
    int ld_s = blockIdx.x, ld_kt = 0, ld_stage = 0;
    const bits16* ld_a = A;  // this thread's first A row at k = ld_kt * BK + ld_chunk * 8
    const bits16* ld_b = B;
    // This thread's A rows 0 .. ld_a_rows-1 and B rows 0 .. ld_b_rows-1 exist (M / N tails); both are
    // 0 past the last tile.
    int ld_a_rows = 0, ld_b_rows = 0;

    auto ld_start_tile = [&]() {
        mma_start_tile<S, BM, BN>(ld_a_rows, ld_b_rows, ld_s, tiles, raster, ld_row0, M, N, ld_chunk, ld_b, B, ldb, ld_a,
                                  A, lda);
    };
    auto issue_load = [&]() {
        mma_issue_load<S, BK, STAGES>(smem, ld_stage, ld_dst, ld_kt, ld_chunk, K, ld_a_rows, ld_b_rows, ld_a, a_row_step,
                                      ld_b, b_row_step);
    };
    // Signal epilogue: thread 0 releases a finished tile's counter after k-tile FO_SIGNAL_RELEASE_KTILE
    // of the CTA's next tile, from the load cursor's once-per-tile branch, so the k-loop's code stays
    // the plain kernel's, and the tile's stores have drained by then (released at the next tile's top
    // barrier, the fence would stall warp 0 on them while the other warps wait at the barrier). With
    // too few k-tiles (KT <= FO_SIGNAL_RELEASE_KTILE + STAGES), at the next tile's top barrier.
    // NOTES: the release is predicated, not branched around (only thread 0 ever has a group due): a
    // divergent branch here put a convergence barrier into the k-loop's code on sm_80.
    int pending_group = -1;  // group of the tile whose release is due (thread 0 only; -1: none)
    auto publish = [&]() {
        if (!kSignal) return;
        red_release_gpu_add_if(pending_group >= 0, group_counter + pending_group, 1u);
        pending_group = -1;
    };
    // At the end of consumer k-tile kt the cursor stands at k-tile kt + STAGES (of the same tile).
    const int release_at = FO_SIGNAL_RELEASE_KTILE + STAGES;
    const bool release_in_loop = kSignal && release_at < KT;
    int ld_hook = KT;  // the cursor position of the next once-per-tile event (signal epilogues)

    // The cursor moves to the next tile after the last k-tile of a tile was issued. Called between
    // k-tiles (where the k-loop's branch and barrier already split the instruction stream).
    auto ld_advance = [&]() {
        if (ld_kt == (kSignal ? ld_hook : KT)) {
            if (!kSignal || ld_kt == KT) {
                ld_kt = 0;
                ld_s += gridDim.x;
                ld_start_tile();
                if (kSignal) ld_hook = release_in_loop ? release_at : KT;
            } else {
                publish();  // the consumer is at the end of k-tile FO_SIGNAL_RELEASE_KTILE
                ld_hook = KT;
            }
        }
    };
    ld_start_tile();

    // --- the warps' fragments (mma_mainloop.cuh) --------------------------------------------------
    u32 a_off[S::KSTEPS], b_off[S::KSTEPS];
    mma_frag_offsets<S, BK>(a_off, b_off, wm, wn, lane);
    u32 afrag[2][S::MI][4];
    u32 bfrag[2][S::NI / 2][4];
    auto load_frags = [&](int buf, int stage, int kk) {
        mma_load_frags<S, BK>(afrag[buf], bfrag[buf], smem, stage, a_off, b_off, kk);
    };

    // Prologue: the first STAGES-1 k-tiles of the stream.
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
        issue_load();
        ld_advance();
    }

    int rd_stage = 0;
    float acc[S::MI][S::NI][4];

    // The tile's coordinates: the next tile's are computed at the end of each tile, among its
    // draining stores. NOTES: computed at the tile's top (where the compiler had hoisted them in the
    // signal kernels), their serial uniform instructions stalled every warp before the barrier.
    int tm, tn;
    raster.tile(blockIdx.x, tm, tn);
#pragma unroll 1
    for (int s = blockIdx.x; s < tiles; s += gridDim.x) {
#pragma unroll
        for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < S::NI; ++ni)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;

        // NOTES: this barrier also orders the previous tile's epilogue (its smem C reads) before this
        // tile's epilogue writes, so the plain epilogue needs no trailing barrier.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (!release_in_loop) publish();
        if (Epi::kProbe && tid == 0) epi::probe_start(probe, tm, tn, tiles_n);
        mma_fetch_rows<S, Epi, BM>(smem_ro, row_offset, placed, tm, tn, tiles_n, M, tid);
        load_frags(0, rd_stage, 0);

#pragma unroll 1
        for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
            for (int kk = 0; kk < S::KSTEPS; ++kk) {
                const int cur = kk & 1;
                if (kk == S::KSTEPS - 1) {
                    rd_stage = rd_stage + 1 == STAGES ? 0 : rd_stage + 1;
                    if (kt + 1 < KT) {
                        // k-tile kt+1 has landed, and every warp is past its reads of k-tile kt-1,
                        // whose slot the next issue_load overwrites.
                        cp_async_wait<STAGES - 2>();
                        __syncthreads();
                        load_frags(cur ^ 1, rd_stage, 0);
                    }
                } else {
                    load_frags(cur ^ 1, rd_stage, kk + 1);
                }
                if (kk == 0) issue_load();
                mma_k16<S, T>(acc, afrag[cur], bfrag[cur]);
            }
            ld_advance();
        }

        // --- epilogue: registers -> smem C (16-byte chunks swizzled by row & 7) -> global ----------
        // The row offsets (or the place) were committed with k-tile (first + STAGES-1) of this tile;
        // the main loop's last wait and barrier covered k-tiles up to (first + KT-1).
        if ((kTableStore || placed) && KT < STAGES) {
            cp_async_wait<0>();
            __syncthreads();
        }
        // A placed tile's place is read before the C staging, which hides its latency. (Declared in
        // this order: see the NOTES at the top.)
        i64 sub_stride = 0, place_at = 0;
        int shift = 0;
        if (placed) {
            place_at = ld_shared_s64(smem_ro);
            sub_stride = ld_shared_s64(smem_ro + 8);
            shift = int(ld_shared_s64(smem_ro + 16));
        }
        mma_stage_c<S, T, BN>(acc, smem_c, wm, wn, lane);
        __syncthreads();

        mma_store_tile<S, Epi, BM, BN, WARPS_M * WARPS_N>(smem_c, smem_ro, C, ldc, comm_buf, row_offset, place_at,
                                                          sub_stride, shift, tm, tn, M, N, warp, lane);

        // Every thread's stores of this tile precede thread 0's release: the next bar.sync (the top of
        // the next tile, or the end) orders them before thread 0 at CTA scope, and red.release.gpu is
        // cumulative, so a consumer that acquires the counter sees all of them. (A separate
        // __threadfence() would be redundant.) The tile's group is loaded here, after its k-loop (one
        // register less across the loop); its latency is hidden until the release uses it.
        if (kSignal && tid == 0) pending_group = tile_group[tm * tiles_n + tn];
        if (Epi::kProbe) {
            // The probe stamps the tile's end when its stores are issued, so it is not deferred.
            __syncthreads();
            if (tid == 0) epi::probe_end(probe, tm * tiles_n + tn);
        }
        raster.tile(s + gridDim.x, tm, tn);  // past the last tile: unused
    }
    if (kSignal) {
        __syncthreads();
        publish();
    }
    cp_async_wait<0>();
}

}  // namespace fo
