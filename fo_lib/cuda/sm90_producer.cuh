// The Hopper GEMM's TMA producer: warp 0, lane 0 of the producer warpgroup loads A (128 x 64) and B
// (BN x 64) of every k-block of its CTA's units (sm90_scheduler.cuh) into the STAGES-deep operand
// ring, each stage guarded by its full/empty mbarriers; it runs ahead across tile boundaries.
//
// Clusters (CLUSTER 2): cluster ranks 0 and 1 run schedule indices 2 i and 2 i + 1 in step. When
// both are tiles of one tile column (a row raster with an even swizzle pairs every tile but an odd
// edge band's) they share the B tile: each producer loads its A and one half of B, multicast into
// both CTAs' stage at the same offset. When both are tiles of one tile row (a column raster with an
// even swizzle, an odd edge band, most pairs of a row raster of swizzle 1) they share A the same way
// (docs/decisions.md, "Clusters of 2 share their common tile, A or B, by TMA multicast"). Both
// operands' tensor maps have half-tile boxes here. A stage may be refilled only when the consumers
// of both CTAs are done with it (each consumer warpgroup arrives on both CTAs' empty barrier).
// Unshared pairs load their whole tiles themselves under the same handshake; a phantom unit loads
// nothing and only arrives, so the consumers keep step.
#pragma once

#include "sm90_scheduler.cuh"
#include "sm90_shape.cuh"

namespace fo {

// The producer's loop (one thread). `rank`: this CTA's rank in its cluster. (Its locals are declared
// in the order that keeps the kernel's binary: see gemm_sm90.cuh's NOTES.)
template <class S, int CLUSTER>
__device__ __forceinline__ void sm90_load_operands(const Sm90Smem<S>& sm, const Sm90Tiles& t, const TmaDesc& tma_a,
                                                   const TmaDesc& tma_b, int sk_tiles, int sk_split,
                                                   const i64* sk_bounds, u32 rank) {
    using namespace sm90;
    constexpr int BM = S::BM, BN = S::BN, BK = S::BK;
    u32 phase = 0;
    int stage = 0;
#pragma unroll 1
    for (Sm90Work w(t.tiles, sk_tiles, sk_split, t.KT, CLUSTER, sk_bounds); w.next();) {
        const bool phantom = w.s >= t.tiles;  // cluster 2, odd tile count: no tile
        int tm = 0, tn = 0;
        if (!phantom) t.raster.tile(w.s, tm, tn);
        // Cluster 2: the pair shares B where both tiles lie in one tile column, A where in one tile row.
        bool share_b = false, share_a = false;
        if (CLUSTER > 1 && !phantom && (w.s ^ 1) < t.tiles) {
            int pm, pn;
            t.raster.tile(w.s ^ 1, pm, pn);
            share_b = pn == tn;
            share_a = pm == tm;
        }
#pragma unroll 1
        for (int kb = w.k0; kb < w.k1; ++kb) {
            const u32 empty = sm.bar_empty + 8 * stage;
            hang_where(0, stage, w.s, w.part, kb);
            mbar_wait(empty, phase ^ 1u);
            const u32 full = sm.bar_full + 8 * stage;
            const u32 dst = sm.base + stage * S::STAGE_BYTES;
            if (phantom) {
                mbar_arrive(full);  // nothing to load: the consumers only keep step
            } else {
                mbar_arrive_expect_tx(full, S::STAGE_BYTES);
                if (CLUSTER == 1) {
                    tma_load_2d(dst, tma_a, full, kb * BK, tm * BM);
                    tma_load_2d(dst + S::A_BYTES, tma_b, full, kb * BK, tn * BN);
                } else {  // both tensor maps have boxes of half a tile here
                    // One operand tile in two halves; shared: this CTA's half, into both CTAs.
                    const auto load_halves = [&](const TmaDesc& map, u32 to, int row0, int half_rows,
                                                 u32 half_bytes, bool shared) {
                        if (shared) {
                            tma_load_2d_multicast(to + rank * half_bytes, map, full, kb * BK,
                                                  row0 + int(rank) * half_rows, 0x3);
                        } else {
                            tma_load_2d(to, map, full, kb * BK, row0);
                            tma_load_2d(to + half_bytes, map, full, kb * BK, row0 + half_rows);
                        }
                    };
                    load_halves(tma_a, dst, tm * BM, BM / 2, S::A_BYTES / 2, share_a);
                    load_halves(tma_b, dst + S::A_BYTES, tn * BN, BN / 2, S::B_BYTES / 2, share_b);
                }
            }
            if (++stage == S::STAGES) {
                stage = 0;
                phase ^= 1u;
            }
        }
    }
    hang_where(0, 0, -1, -1, -9);  // done
}

}  // namespace fo
