// The Hopper GEMM's shape: the tile's constants, what one CTA's shared memory holds (Sm90Shape, whose
// sum fo_lib.gemm.sm90.Sm90Config.smem_bytes repeats, a test compiles both) and where each part lies
// (Sm90Smem: the operand ring, the C staging tile, the row offsets and the mbarriers, with their
// arrival counts; the handshakes themselves are listed in gemm_sm90.cuh).
#pragma once

#include "sm90_ptx.cuh"

namespace fo {

// NOTES: with -default-device every static data member of an instantiated class is emitted into the
// cubin as a global, so constants added for the roles are enumerators (no storage): the kernels'
// binaries stay those of the constants they compute with.
template <int BN_, int STAGES_, bool PINGPONG_ = false, bool DIRECT_C_ = false>
struct Sm90Shape {
    enum : int { BN = BN_, STAGES = STAGES_ };
    enum : bool { PINGPONG = PINGPONG_, DIRECT_C = DIRECT_C_ };
    static constexpr int BM = 128;
    static constexpr int BK = 64;  // one 128-byte swizzle span of 16-bit elements
    static constexpr int THREADS = 384;
    static constexpr int STORE_THREADS = 96;  // warps 1-3 of the producer warpgroup
    static constexpr int ACC = BN / 2;        // fp32 accumulators per consumer thread (64 x BN / 128)
    static constexpr int A_BYTES = BM * BK * 2;
    static constexpr int B_BYTES = BN * BK * 2;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int C_CHUNKS = BN / 8;  // 16-byte chunks per C row
    // The C staging tile: where a row holds a multiple of 8 chunks they are XOR-swizzled by row & 7,
    // else each row is padded to an odd number of chunks. Either way the 8 rows one stmatrix phase
    // writes (same chunk) fall in 8 distinct bank groups; a store-warp phase (8 consecutive chunks)
    // does too unless it crosses a padded row's end (then 2-way, on the store warps, off the
    // consumers' path).
    static constexpr bool C_SWIZZLED = C_CHUNKS % 8 == 0;
    static constexpr int C_ROW_BYTES = 16 * (C_SWIZZLED ? C_CHUNKS : (C_CHUNKS | 1));
    // DIRECT_C (ping-pong): no C tile; each consumer warp stages its 16 rows of each half through
    // two 16 x 64 buffers of its own (2 KB each, chunks XOR-swizzled by row & 7) on their way to
    // global memory.
    static constexpr int WARP_C_BYTES = 16 * 128;
    static constexpr int C_BYTES = DIRECT_C ? 8 * 2 * WARP_C_BYTES : BM * C_ROW_BYTES;
    static constexpr int RO_BYTES = BM * 8;
    static constexpr int BAR_BYTES = (2 * STAGES + 2 + (PINGPONG ? 4 : 0)) * 8;  // + ping-pong's two order pairs
    // + 1024: the dynamic shared memory is aligned up to the 1024-byte swizzle atom in the kernel.
    static constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + C_BYTES + RO_BYTES + BAR_BYTES;
    // Ping-pong: a consumer holds a whole tile's accumulators (BN per thread), so it takes more.
    static constexpr int PRODUCER_REGS = PINGPONG ? 40 : 56;
    static constexpr int CONSUMER_REGS = PINGPONG ? 232 : 224;

    // wgmma m64nBN and a B stage of whole 1024-byte swizzle atoms need BN % 8 (clusters' halves of B: 16).
    static_assert(BN % 8 == 0 && BN >= 128 && BN <= 256, "BN must be a multiple of 8 in [128, 256]");
    static_assert(STAGES >= 2 && STAGES <= 8, "STAGES must be in [2, 8]");
    static_assert(STAGE_BYTES % 1024 == 0 && A_BYTES % 1024 == 0, "stages must keep 1024-byte alignment");
    static_assert(SMEM_BYTES <= 232448, "more shared memory than an sm_90 block can have");
    // setmaxnreg.inc only gets what setmaxnreg.dec gave back of the CTA's launch allocation (168 per
    // thread: __launch_bounds__(384, 1)); asking for more waits forever.
    static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 256 <= 168 * THREADS, "more registers than the launch holds");
    // Consumers that store C themselves take turns (ping-pong): their stores then run under the
    // other warpgroup's MMAs (docs/decisions.md, "Only ping-pong consumers store C themselves").
    static_assert(!DIRECT_C || PINGPONG, "DIRECT_C needs ping-pong consumers");

    // Shared address of 16-byte chunk ch of row r of the C staging tile at smem_c.
    static __device__ __forceinline__ u32 c_chunk(u32 smem_c, int r, int ch) {
        return smem_c + r * C_ROW_BYTES + ((C_SWIZZLED ? (ch ^ (r & 7)) : ch) << 4);
    }
    // DIRECT_C: chunk ch (0-7) of row r (0-15) of a warp's buffer at buf.
    static __device__ __forceinline__ u32 warp_c_chunk(u32 buf, int r, int ch) {
        return buf + r * 128 + ((ch ^ (r & 7)) << 4);
    }
};

// Where each part of Sm90Shape S lies in the CTA's dynamic shared memory, from its start `smem` (a
// shared address) aligned up to 1024 bytes: the operand ring (stage s at base + s * STAGE_BYTES, A
// then B), the C staging tile (DIRECT_C: the consumer warps' buffers), the store warps' row offsets,
// then the mbarriers.
template <class S>
struct Sm90Smem {
    u32 base, smem_c, smem_ro;
    u32 bar_full, bar_empty, bar_c_full, bar_c_empty, bar_order, bar_epi;

    __device__ __forceinline__ explicit Sm90Smem(u32 smem) {
        // NOTES: 128B-swizzled TMA boxes and wgmma descriptors assume 1024-byte aligned atoms; the
        // dynamic shared window is not promised to start there, so align up (SMEM_BYTES has the slack).
        base = (smem + 1023u) & ~1023u;
        smem_c = base + S::STAGES * S::STAGE_BYTES;
        smem_ro = smem_c + S::C_BYTES;
        bar_full = smem_ro + S::RO_BYTES;  // full[s] = bar_full + 8 s
        bar_empty = bar_full + 8 * S::STAGES;
        bar_c_full = bar_empty + 8 * S::STAGES;
        bar_c_empty = bar_c_full + 8;
        bar_order = bar_c_empty + 8;  // ping-pong: order[c] = bar_order + 8 c (main loops)
        bar_epi = bar_order + 16;     // ping-pong: epi[c] = bar_epi + 8 c (C staging)
    }

    // Thread 0, once: every mbarrier with its arrival count (gemm_sm90.cuh lists who arrives).
    template <int CLUSTER>
    __device__ __forceinline__ void init_barriers() const {
        using namespace sm90;
#pragma unroll
        for (int s = 0; s < S::STAGES; ++s) {
            mbar_init(bar_full + 8 * s, 1);
            // each consumer WG (ping-pong: the one whose unit it holds) of each cluster CTA
            mbar_init(bar_empty + 8 * s, (S::PINGPONG ? 1 : 2) * CLUSTER);
        }
        mbar_init(bar_c_full, S::PINGPONG ? 128 : 256);  // every thread of the warpgroup(s) computing a tile
        if (S::PINGPONG) {
#pragma unroll
            for (int i = 0; i < 4; ++i) mbar_init(bar_order + 8 * i, 1);  // order[0..1], epi[0..1]
        }
        mbar_init(bar_c_empty, S::STORE_THREADS);
        // Make the initialised barriers visible to the async proxy (TMA complete_tx) as well.
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
};

}  // namespace fo
