// Portable tensor-core GEMM, C = A @ B^T ("NT"), with the FlashOverlap epilogues.
//
//   A: M x K row-major (lda), B: N x K row-major (ldb, the nn.Linear weight), C: M x N row-major (ldc).
//   bf16 or fp16 in, fp32 accumulation, same 16-bit type out. Runs on sm_80 / 86 / 89 / 90.
//
// Structure (one CTA per SM, persistent):
//   * CTA b of P walks schedule indices s = b, b + P, ... and maps each to a tile with
//     fo::TileRaster, so tile s runs in wave s / P: the wave model of fo_lib.tiling holds exactly.
//   * Main loop: mma.sync.m16n8k16, operands fetched with ldmatrix.x4 from a STAGES-deep cp.async
//     ring, fragments double-buffered across the k16 steps, one __syncthreads per k-tile.
//   * The cp.async stream runs across tile boundaries: while a CTA finishes one tile (last k-tiles and
//     the epilogue) it is already fetching the first STAGES-1 k-tiles of its next tile.
//   * Epilogue: accumulators -> a separate smem C tile (so it never waits for the operand ring)
//     -> 16-byte coalesced global stores. EPILOGUE 0 = plain store, 1 = store through a row table
//     into the communication buffer and signal the tile's group counter, 2 = plain store plus a
//     per-tile timing probe, 3 = store through the row table without signalling (the pre-reorder
//     alone: the non-overlapped path and the ablation of the signal's cost), 4 = store into the
//     communication buffer row-major (ldc, the AllReduce "rows" layout) or each tile at its place
//     (the tile layouts), chosen per launch, and signal.
//
// NOTES: no toolkit headers (see common.cuh); every shared-memory access is PTX on 32-bit shared
// addresses, every 16-bit value is raw bits.
#pragma once

#include "common.cuh"
#include "tile_schedule.cuh"

// Signal epilogues: the k-tile of the CTA's next tile after which a finished tile's counter is
// released (see gemm_nt_body). A compile-time option for experiments (FO_NVRTC_OPTIONS).
#ifndef FO_SIGNAL_RELEASE_KTILE
#define FO_SIGNAL_RELEASE_KTILE 1
#endif

namespace fo {
namespace mma_detail {

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// 16-byte async copy; when `pred` is false nothing is read and the 16 bytes are zero-filled.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(pred ? 16 : 0)
                 : "memory");
}
// 8-byte async copy (zero-filled when `pred` is false).
__device__ __forceinline__ void cp_async8(u32 dst, const void* src, bool pred) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(pred ? 8 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void mma_16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1, bf16_tag) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1, f16_tag) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void st_shared_b32(u32 addr, u32 v) {
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v));
}
__device__ __forceinline__ void ld_shared_v4(u32 addr, u32 (&v)[4]) {
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(addr));
}
__device__ __forceinline__ i64 ld_shared_s64(u32 addr) {
    i64 v;
    asm volatile("ld.shared.s64 %0, [%1];" : "=l"(v) : "r"(addr));
    return v;
}
__device__ __forceinline__ void st_global_v4(void* p, const u32 (&v)[4]) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v[0]), "r"(v[1]), "r"(v[2]),
                 "r"(v[3]));
}

// Operand tiles are rows of BK 16-bit values = CPR 16-byte chunks. The physical chunk of logical
// chunk c in row r is c ^ ((r / RPL) % CPR), RPL = rows per 128-byte line. Eight consecutive rows at
// one logical chunk (one ldmatrix phase) then hit eight different 16-byte bank groups.
template <int BK>
__device__ __forceinline__ int operand_swizzle(int row, int chunk) {
    constexpr int CPR = BK / 8;
    constexpr int RPL = 8 / CPR;
    return chunk ^ ((row / RPL) & (CPR - 1));
}

}  // namespace mma_detail

template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
struct GemmShape {
    static constexpr int THREADS = WARPS_M * WARPS_N * 32;
    static constexpr int WM = BM / WARPS_M;  // warp tile
    static constexpr int WN = BN / WARPS_N;
    static constexpr int MI = WM / 16;  // m16 fragments per warp
    static constexpr int NI = WN / 8;   // n8 fragments per warp
    static constexpr int KSTEPS = BK / 16;
    static constexpr int CPR = BK / 8;  // 16-byte chunks per operand row
    static constexpr int A_STAGE_BYTES = BM * BK * 2;
    static constexpr int B_STAGE_BYTES = BN * BK * 2;
    static constexpr int STAGE_BYTES = A_STAGE_BYTES + B_STAGE_BYTES;
    static constexpr int C_BYTES = BM * BN * 2;
    static constexpr int ROW_OFFSET_BYTES = BM * 8;  // the signal epilogue's row table slice
    static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + C_BYTES + ROW_OFFSET_BYTES;
    static constexpr int A_LOADS = BM * CPR / THREADS;  // cp.async per thread per k-tile
    static constexpr int B_LOADS = BN * CPR / THREADS;
    static constexpr int ROW_STEP = THREADS / CPR;  // rows between one thread's chunks
    static constexpr int C_CPR = BN / 8;            // 16-byte chunks per C row
    static constexpr int C_STORES = BM * C_CPR / THREADS;
    static constexpr int C_ROW_STEP = 32 / C_CPR;  // rows a warp stores at once: a thread's row step

    static_assert(BK == 32 || BK == 64, "BK must be 32 or 64 (swizzle assumes 64- or 128-byte rows)");
    static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16x16");
    static_assert(BM % WARPS_M == 0 && BN % WARPS_N == 0, "tile must split evenly over warps");
    static_assert(BN % 64 == 0, "BN must be a multiple of 64 (C staging swizzle)");
    static_assert(STAGES >= 2, "need at least two pipeline stages");
    static_assert((BM * CPR) % THREADS == 0 && (BN * CPR) % THREADS == 0, "operand loads must split evenly");
    static_assert(THREADS % CPR == 0 && ROW_STEP % 8 == 0, "swizzle must be constant over a thread's chunks");
    static_assert((BM * C_CPR) % THREADS == 0 && 32 % C_CPR == 0, "C stores must split evenly over the warps");
    static_assert(BM <= THREADS, "one thread per tile row fetches the signal row offsets");
};

// EPILOGUE: 0 plain (C), 1 signal (comm_buf through row_offset + group counters), 2 probe (C + probe),
// 3 scatter (comm_buf through row_offset, no signal), 4 signal_store + group counters: with row_offset
// null, C row-major (the communication buffer passed as C); else comm_buf at each tile's place,
// row_offset pointing to the places: int64 [tiles, 4] = {base, sub_stride, sub_shift, 0}, row r of
// tile t at base + (r >> sub_shift) * sub_stride + (r & (2^sub_shift - 1)) * cols (fo_lib.reorder's
// tile and subtile layouts). Pointers an epilogue does not use may be null.
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, class T, int EPILOGUE>
__device__ __forceinline__ void gemm_nt_body(const bits16* __restrict__ A, const bits16* __restrict__ B,
                                             bits16* __restrict__ C, int M, int N, int K, i64 lda, i64 ldb,
                                             i64 ldc, int order, int swizzle, bits16* __restrict__ comm_buf,
                                             const i64* __restrict__ row_offset,
                                             const int* __restrict__ tile_group, u32* group_counter,
                                             u64* __restrict__ probe) {
    using S = GemmShape<BM, BN, BK, WARPS_M, WARPS_N, STAGES>;
    using namespace mma_detail;
    static_assert(EPILOGUE >= 0 && EPILOGUE <= 4,
                  "EPILOGUE is 0 plain, 1 signal, 2 probe, 3 scatter or 4 signal_store");
    constexpr bool kTableStore = EPILOGUE == 1 || EPILOGUE == 3;
    constexpr bool kSignal = EPILOGUE == 1 || EPILOGUE == 4;
    // signal_store: C row-major (ldc) into the communication buffer, or, when row_offset holds tile
    // places, each tile at its place: chosen per launch. NOTES: one kernel for both, because compiled
    // as two their k-loops were scheduled unlike plain's and ran slower; as one, the loop is plain's.
    const bool placed = EPILOGUE == 4 && row_offset != nullptr;

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

    // --- cp.async producer: a cursor over this CTA's (tile, k-tile) stream ------------------------
    // NOTES: the per-k-tile loads are straight-line code (no branch), so the scheduler interleaves
    // them with the MMAs; everything that depends on the tile (raster, row pointers, how many of the
    // thread's rows exist) is computed once per tile in ld_start_tile, outside the MMA stream. Computing the
    // addresses and row guards of all 12 loads per k-tile inside `if (tile < tiles)` put a long
    // serial chain in front of the MMAs of every k-tile.
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
        ld_a_rows = ld_b_rows = 0;
        if (ld_s < tiles) {
            int tm, tn;
            raster.tile(ld_s, tm, tn);
            const int ra = tm * BM + ld_row0;
            const int rb = tn * BN + ld_row0;
            ld_a_rows = ra < M ? min(S::A_LOADS, (M - ra + S::ROW_STEP - 1) / S::ROW_STEP) : 0;
            ld_b_rows = rb < N ? min(S::B_LOADS, (N - rb + S::ROW_STEP - 1) / S::ROW_STEP) : 0;
            // The first row is clamped inside the operand; the addresses of rows past the count
            // (beyond M or N) are formed but never read.
            ld_a = A + i64(min(ra, M - 1)) * lda + ld_chunk * 8;
            ld_b = B + i64(min(rb, N - 1)) * ldb + ld_chunk * 8;
        }
    };
    auto issue_load = [&]() {
        const u32 sa = smem + ld_stage * S::STAGE_BYTES + ld_dst;
        const u32 sb = sa + S::A_STAGE_BYTES;
        // K % 8 == 0: a 16-byte chunk is all in or all out. A load past the row count (or the K
        // tail) reads nothing (zero-fill), so its address is never used.
        const bool k_ok = ld_kt * BK + ld_chunk * 8 < K;
        const int a_rows = k_ok ? ld_a_rows : 0;
        const int b_rows = k_ok ? ld_b_rows : 0;
        const bits16* pa = ld_a;
#pragma unroll
        for (int i = 0; i < S::A_LOADS; ++i) {
            cp_async16(sa + i * S::ROW_STEP * BK * 2, pa, i < a_rows);
            pa += a_row_step;
        }
        const bits16* pb = ld_b;
#pragma unroll
        for (int i = 0; i < S::B_LOADS; ++i) {
            cp_async16(sb + i * S::ROW_STEP * BK * 2, pb, i < b_rows);
            pb += b_row_step;
        }
        // NOTES: commit even when nothing was issued, so "k-tile g is complete" is always
        // "at most STAGES-2 groups pending".
        cp_async_commit();
        ld_a += BK;
        ld_b += BK;
        ++ld_kt;
        ld_stage = ld_stage + 1 == STAGES ? 0 : ld_stage + 1;
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

    // --- ldmatrix addressing (per lane, constant over fragments: 16-row steps keep the swizzle) ---
    u32 a_off[S::KSTEPS], b_off[S::KSTEPS];
    {
        const int ra = wm * S::WM + (lane & 15);
        const int rb = wn * S::WN + (lane & 7) + ((lane >> 4) << 3);
#pragma unroll
        for (int kk = 0; kk < S::KSTEPS; ++kk) {
            a_off[kk] = ra * (BK * 2) + operand_swizzle<BK>(ra, kk * 2 + (lane >> 4)) * 16;
            b_off[kk] = S::A_STAGE_BYTES + rb * (BK * 2) + operand_swizzle<BK>(rb, kk * 2 + ((lane >> 3) & 1)) * 16;
        }
    }
    u32 afrag[2][S::MI][4];
    u32 bfrag[2][S::NI / 2][4];  // one ldmatrix.x4 = two n8 fragments: {b0, b1} of 2p, then of 2p+1
    auto load_frags = [&](int buf, int stage, int kk) {
        const u32 base = smem + stage * S::STAGE_BYTES;
#pragma unroll
        for (int mi = 0; mi < S::MI; ++mi) ldmatrix_x4(afrag[buf][mi], base + a_off[kk] + mi * 16 * BK * 2);
#pragma unroll
        for (int p = 0; p < S::NI / 2; ++p) ldmatrix_x4(bfrag[buf][p], base + b_off[kk] + p * 16 * BK * 2);
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
        if (EPILOGUE == 2 && tid == 0) probe[(tm * tiles_n + tn) * 4 + 0] = globaltimer_ns();
        if (kTableStore && tid < BM) {
            // NOTES: the tile's BM row offsets ride in the cp.async group of this tile's first
            // issue_load, so they land during the main loop instead of costing a dependent global
            // load per 16-byte store in the epilogue.
            const int grow = tm * BM + tid;
            const bool ok = grow < M;
            cp_async8(smem_ro + tid * 8, ok ? row_offset + i64(grow) * tiles_n + tn : row_offset, ok);
        }
        // A placed tile needs its 32-byte place only: two cp.async in the same group. It replaces the
        // BM row offsets, and the epilogue's per-store shared load of one.
        if (placed && tid < 2) cp_async16(smem_ro + tid * 16, row_offset + i64(tm * tiles_n + tn) * 4 + tid * 2, true);
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
#pragma unroll
                for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
                    for (int ni = 0; ni < S::NI; ++ni)
                        mma_16816(acc[mi][ni], afrag[cur][mi], bfrag[cur][ni >> 1][(ni & 1) * 2],
                                  bfrag[cur][ni >> 1][(ni & 1) * 2 + 1], T{});
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
        // A placed tile's place is read before the C staging, which hides its latency.
        i64 place_at = 0, sub_stride = 0;
        int shift = 0;
        if (placed) {
            place_at = ld_shared_s64(smem_ro);
            sub_stride = ld_shared_s64(smem_ro + 8);
            shift = int(ld_shared_s64(smem_ro + 16));
        }
#pragma unroll
        for (int mi = 0; mi < S::MI; ++mi) {
#pragma unroll
            for (int ni = 0; ni < S::NI; ++ni) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = wm * S::WM + mi * 16 + (lane >> 2) + h * 8;
                    const int chunk = (wn * S::WN + ni * 8) >> 3;
                    st_shared_b32(smem_c + row * (BN * 2) + ((chunk ^ (row & 7)) << 4) + (lane & 3) * 4,
                                  pack2(T{}, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]));
                }
            }
        }
        __syncthreads();

        const int rows = min(BM, M - tm * BM);
        const int cols = min(BN, N - tn * BN);
        // 16-byte chunks from smem C to global. Warp w stores the rows w * BM / WARPS onwards, whole
        // rows at a time (C_ROW_STEP rows per store instruction): lane l stores chunk st_ch of rows
        // st_r0, st_r0 + C_ROW_STEP, ... NOTES: the rows are written as a base plus a step (not as a
        // division per store, which had the compiler keep every store's smem address in registers
        // across the k-loop); the CTA's warps write rows BM / WARPS apart rather than 16 consecutive
        // rows at once, which measured faster for the row-table store.
        constexpr int ROWS_PER_WARP = BM / (WARPS_M * WARPS_N);
        const int st_r0 = warp * ROWS_PER_WARP + lane / S::C_CPR;
        const int st_ch = lane % S::C_CPR;
        auto st_row = [&](int i) { return st_r0 + i * S::C_ROW_STEP; };
        auto st_smem_at = [&](int i) {
            const int r = st_row(i);
            return smem_c + r * (BN * 2) + ((st_ch ^ (r & 7)) << 4);
        };
        const int st_n = cols - st_ch * 8;  // columns left from this thread's chunk
        // Any layout: row r at row_dst(r); a partial or unaligned chunk is stored element by element.
        auto store_rows = [&](auto row_dst) {
#pragma unroll
            for (int i = 0; i < S::C_STORES; ++i) {
                const int r = st_row(i);
                if (r < rows && st_n > 0) {
                    u32 v[4];
                    ld_shared_v4(st_smem_at(i), v);
                    bits16* dst = row_dst(r) + st_ch * 8;
                    if (st_n >= 8 && (reinterpret_cast<unsigned long long>(dst) & 15) == 0) {
                        st_global_v4(dst, v);
                    } else {
#pragma unroll
                        for (int e = 0; e < 8; ++e)
                            if (e < st_n) dst[e] = bits16(v[e >> 1] >> ((e & 1) * 16));
                    }
                }
            }
        };
        // Row r at base + r * stride (row-major C, a whole tile at its place). NOTES: when every row
        // of the thread is a whole aligned chunk, a store is its row guard, the smem load and the
        // 16-byte store (address: one add); store_rows' per-store address and checks are several
        // times that, a large share of a tile when K is small.
        auto store_strided = [&](bits16* base, i64 stride) {
            bits16* p = base + i64(st_r0) * stride + st_ch * 8;
            if (st_n >= 8 && ((reinterpret_cast<unsigned long long>(p) | u64(stride) * 2) & 15) == 0) {
                const i64 step = i64(S::C_ROW_STEP) * stride;
#pragma unroll
                for (int i = 0; i < S::C_STORES; ++i) {
                    if (st_row(i) < rows) {
                        u32 v[4];
                        ld_shared_v4(st_smem_at(i), v);
                        st_global_v4(p, v);
                    }
                    p += step;
                }
            } else {
                store_rows([&](int r) { return base + i64(r) * stride; });
            }
        };
        if (kTableStore) {
            store_rows([&](int r) { return comm_buf + ld_shared_s64(smem_ro + r * 8); });
        } else if (EPILOGUE == 4) {
            bits16* const place = comm_buf + place_at;
            const bool subtiles = placed && (BM - 1) >> shift != 0;
            bits16* const base = placed ? place : C + i64(tm * BM) * ldc + tn * BN;
            const i64 stride = placed ? i64(cols) : ldc;
            if (!subtiles) {
                store_strided(base, stride);  // row-major C, or a tile with no subtiles
            } else {
                store_rows([&](int r) {
                    return place + i64(r >> shift) * sub_stride + i64(u32(r) & ((1u << shift) - 1u)) * cols;
                });
            }
        } else {
            store_strided(C + i64(tm * BM) * ldc + tn * BN, ldc);
        }

        // Every thread's stores of this tile precede thread 0's release: the next bar.sync (the top of
        // the next tile, or the end) orders them before thread 0 at CTA scope, and red.release.gpu is
        // cumulative, so a consumer that acquires the counter sees all of them. (A separate
        // __threadfence() would be redundant.) The tile's group is loaded here, after its k-loop (one
        // register less across the loop); its latency is hidden until the release uses it.
        if (kSignal && tid == 0) pending_group = tile_group[tm * tiles_n + tn];
        if (EPILOGUE == 2) {
            // The probe stamps the tile's end when its stores are issued, so it is not deferred.
            __syncthreads();
            if (tid == 0) {
                const int tile_id = tm * tiles_n + tn;
                probe[tile_id * 4 + 1] = globaltimer_ns();
                probe[tile_id * 4 + 2] = smid();
                probe[tile_id * 4 + 3] = blockIdx.x;
            }
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
