// The portable GEMM's shape: a CTA's tile, its warps' tiles and fragments, what one CTA's shared
// memory holds (the operand ring, the C staging tile, the row offsets) and how the loads and the C
// stores split over the threads. fo_lib.gemm.portable.GemmConfig checks the same constraints.
#pragma once

#include "common.cuh"

namespace fo {

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

}  // namespace fo
