// The portable GEMM's main loop pieces: each warp's ldmatrix addressing of the operand ring (per lane,
// constant over fragments: 16-row steps keep the swizzle), the fragment loads of one k16 step, and its
// MMAs (mma.sync.m16n8k16 over the warp's MI x NI fragments). The kernel's k-loop double-buffers
// the fragments across the k16 steps and waits for the ring once per k-tile (gemm_mma.cuh).
#pragma once

#include "mma_ptx.cuh"
#include "mma_shape.cuh"

namespace fo {

// This lane's byte offsets in a stage of its A and B fragments' rows, per k16 step.
template <class S, int BK>
__device__ __forceinline__ void mma_frag_offsets(u32 (&a_off)[S::KSTEPS], u32 (&b_off)[S::KSTEPS], int wm, int wn,
                                                 int lane) {
    using namespace mma_detail;
    const int ra = wm * S::WM + (lane & 15);
    const int rb = wn * S::WN + (lane & 7) + ((lane >> 4) << 3);
#pragma unroll
    for (int kk = 0; kk < S::KSTEPS; ++kk) {
        a_off[kk] = ra * (BK * 2) + operand_swizzle<BK>(ra, kk * 2 + (lane >> 4)) * 16;
        b_off[kk] = S::A_STAGE_BYTES + rb * (BK * 2) + operand_swizzle<BK>(rb, kk * 2 + ((lane >> 3) & 1)) * 16;
    }
}

// The warp's fragments of k16 step kk from ring stage `stage`: a (MI x m16k16) and b (NI x n8k16; one
// ldmatrix.x4 = two n8 fragments: {b0, b1} of 2p, then of 2p+1).
template <class S, int BK>
__device__ __forceinline__ void mma_load_frags(u32 (&a)[S::MI][4], u32 (&b)[S::NI / 2][4], u32 smem, int stage,
                                               const u32 (&a_off)[S::KSTEPS], const u32 (&b_off)[S::KSTEPS], int kk) {
    using namespace mma_detail;
    const u32 base = smem + stage * S::STAGE_BYTES;
#pragma unroll
    for (int mi = 0; mi < S::MI; ++mi) ldmatrix_x4(a[mi], base + a_off[kk] + mi * 16 * BK * 2);
#pragma unroll
    for (int p = 0; p < S::NI / 2; ++p) ldmatrix_x4(b[p], base + b_off[kk] + p * 16 * BK * 2);
}

// The MMAs of one k16 step into the warp's accumulators.
template <class S, class T>
__device__ __forceinline__ void mma_k16(float (&acc)[S::MI][S::NI][4], const u32 (&a)[S::MI][4],
                                        const u32 (&b)[S::NI / 2][4]) {
    using namespace mma_detail;
#pragma unroll
    for (int mi = 0; mi < S::MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < S::NI; ++ni)
            mma_16816(acc[mi][ni], a[mi], b[ni >> 1][(ni & 1) * 2], b[ni >> 1][(ni & 1) * 2 + 1], T{});
}

}  // namespace fo
