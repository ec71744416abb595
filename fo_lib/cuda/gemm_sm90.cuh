// Hopper (sm_90a) GEMM, C = A @ B^T ("NT"), with the FlashOverlap epilogues: the kernel, composed
// of its roles (docs/decisions.md, "The Hopper kernel is composed of headers by role").
//
//   A: M x K row-major, B: N x K row-major (the nn.Linear weight), both read through 2-D TMA tensor
//   maps (128B swizzle, OOB zero fill: tails in M, N and K need no predication in the main loop).
//   C: M x N row-major (ldc). bf16 or fp16 in, fp32 accumulation, same 16-bit type out.
//
// One persistent CTA per SM, 384 threads = 3 warpgroups, tile 128 x BN x 64 (BN a multiple of 8 in
// [128, 256], of 16 in clusters: tile widths between 128 and 256 let a grid fill its last wave, as
// cuBLAS's 168-wide tile fills two waves of 1536 x 3584 on 132 SMs).
//   * WG 0 (producer, setmaxnreg.dec to 56 registers, ping-pong 40): warp 0, lane 0 loads the
//     operands by TMA (sm90_producer.cuh); warps 1-3, the store warps, store the finished C tiles
//     and publish them (sm90_epilogue.cuh).
//   * WG 1 and WG 2 (consumers, setmaxnreg.inc to 224, ping-pong 232): for every unit, the wgmma
//     main loop (sm90_mainloop.cuh), the stream-K fixup (sm90_fixup.cuh) and the C staging
//     (sm90_epilogue.cuh), cooperative (rows 0-63 and 64-127 of each tile) or ping-pong (whole
//     tiles in turns, PINGPONG): the loop below.
//   * Which units each CTA runs, with the stream-K tail (split tail or runs): sm90_scheduler.cuh;
//     compiled in only where the config asks for one (STREAM_K, a single CTA): the tail's code kept
//     the consumers' loop state out of uniform registers, so every other kernel runs without it
//     (sk_tiles is then ignored).
//   * The epilogue policy Epi (epilogue.cuh): Plain, Signal, Probe, Scatter, SignalRows or
//     SignalTiles, the same names and meanings as the portable kernel's (gemm_mma.cuh).
//   * Shared memory and the barriers' arrival counts: sm90_shape.cuh; PTX wrappers: sm90_ptx.cuh.
//
// Handshakes (all mbarriers, phase parity tracked by counters, never re-initialised):
//   full[s]   : 1 arrival (producer's expect_tx) + the TMA bytes     -> consumers may read stage s
//   empty[s]  : 2 arrivals (one thread per consumer WG, once the stage's MMAs are done; ping-pong:
//               1, the WG of the stage's unit; CLUSTER 2: twice as many, the other CTA's
//               consumers too)                                      -> producer may refill
//   c_full    : 256 arrivals (every consumer thread after its st.shared of C; ping-pong: 128, the
//               tile's warpgroup; DIRECT_C: after its global stores) -> store warps may read C
//               (DIRECT_C: publish the tile)
//   c_empty   : 96 arrivals (every store thread after its ld.shared of C; DIRECT_C: after its wait
//               on c_full, so c_full never completes a phase unseen) -> consumers may write C
//   order[c]  : ping-pong, 1 arrival (thread 0 of the other consumer WG, once its unit's last MMAs
//               are issued; a phantom's after its walk of the stages)
//   epi[c]    : ping-pong, 1 arrival (thread 0 of the other consumer WG, after staging its unit's C
//               tile, or passing a unit without one)
//   named barrier 1: the 96 store threads; named barrier 2: the 256 consumer threads (stream-K;
//   ping-pong: 2 + c, the 128 threads of consumer warpgroup c); 3 + c (ping-pong: 2 + c): the 128
//   threads of consumer warpgroup c at each stage of a walk without reads (a phantom unit, a
//   warpgroup without rows), before the one arrival that frees it.
//   CLUSTER 2: a cluster barrier after the barriers are initialised (the other CTA multicasts into
//   this one's ring) and one before exit (its last arrivals on this CTA's barriers).
// NOTES: smem C is written and read by the generic proxy only (st.shared / ld.shared), and the operand
// ring by the async proxy only (TMA writes, wgmma reads), so no fence.proxy.async is needed anywhere.
// Diagnosis: FO_NVRTC_OPTIONS=-DFO_SM90_HANG_TRAP=1 (sm90_ptx.cuh) turns a hang into a report and a trap.
// NOTES: the consumers' loop over their units stays in the kernel, which hands each role the
// kernel's locals as the one-function kernel used them: loop-carried ones by value (the ring's
// place goes to the main loop and comes back), table_row and add_slot as closures of the kernel,
// and the locals (here and in the roles) in their order of declaration. That decides the order in
// which the compiler promotes them to registers, and with it ptxas' allocation: a role that took
// them by reference compiled to other binaries (docs/decisions.md, "The Hopper kernel is composed
// of headers by role"; scripts/tooling/kernel_hashes.py tells whether an edit changed a binary).
#pragma once

#include "sm90_epilogue.cuh"
#include "sm90_fixup.cuh"
#include "sm90_producer.cuh"

namespace fo {

// Pointers an epilogue does not use may be null.
template <int BN, int STAGES, int CLUSTER, bool PINGPONG, class T, class Epi, bool DIRECT_C = false,
          bool STREAM_K = false>
__device__ __forceinline__ void gemm_sm90_body(const TmaDesc& tma_a, const TmaDesc& tma_b, bits16* __restrict__ C,
                                               int M, int N, int K, i64 ldc, int order, int swizzle,
                                               bits16* __restrict__ comm_buf, const i64* __restrict__ row_offset,
                                               const int* __restrict__ tile_group, u32* group_counter,
                                               u64* __restrict__ probe, int sk_tiles, int sk_split, float* sk_partial,
                                               u32* sk_flag, const i64* __restrict__ sk_bounds) {
    using S = Sm90Shape<BN, STAGES, PINGPONG, DIRECT_C>;
    using namespace sm90;
    static_assert(CLUSTER == 1 || CLUSTER == 2, "CLUSTER is 1 or 2 CTAs");
    static_assert(CLUSTER == 1 || !STREAM_K, "clusters run whole waves: no stream-K tail");
    static_assert(CLUSTER == 1 || BN % 16 == 0, "clusters multicast halves of B: BN a multiple of 16");
    static_assert(!Epi::kRowsOrPlaces,
                  "the Hopper kernel compiles SignalRows and SignalTiles apart: no SignalStore");
    // Without STREAM_K the tail's code folds away (as in clusters), and with it the values that kept
    // ptxas from holding the consumers' loop state in uniform registers.
    if (!STREAM_K) sk_tiles = 0;

    extern __shared__ unsigned char fo_sm90_smem[];
    const Sm90Smem<S> sm(smem_u32(fo_sm90_smem));
    const int tiles_m = (M + S::BM - 1) / S::BM;
    const int tiles_n = (N + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n;
    const TileRaster raster(tiles_m, tiles_n, order, swizzle);
    const int KT = (K + S::BK - 1) / S::BK;
    const Sm90Tiles t{M, N, tiles_m, tiles_n, tiles, raster, KT};
    const int wg = threadIdx.x / 128;
    const int tid = threadIdx.x % 128;

    if (threadIdx.x == 0) {
        prefetch_tma_desc(tma_a);
        prefetch_tma_desc(tma_b);
        sm.template init_barriers<CLUSTER>();
    }
    __syncthreads();
    // The other CTA multicasts into this one's ring and arrives on its barriers: not before they exist.
    if (CLUSTER > 1) cluster_sync();
    const u32 rank = CLUSTER > 1 ? cluster_ctarank() : 0u;

    if (wg == 0) {
        regs_dealloc<S::PRODUCER_REGS>();
        const int warp = tid / 32;
        const int lane = tid % 32;
        if (warp == 0) {
            if (lane == 0) sm90_load_operands<S, CLUSTER>(sm, t, tma_a, tma_b, sk_tiles, sk_split, sk_bounds, rank);
        } else {
            sm90_store_tiles<S, CLUSTER, Epi>(sm, t, C, ldc, comm_buf, row_offset, tile_group, group_counter, probe,
                                              sk_tiles, sk_split, sk_bounds, tid, lane);
        }
    } else {
        regs_alloc<S::CONSUMER_REGS>();
        using G = Sm90Warpgroup<S, STREAM_K>;
        constexpr int H = G::H;
        const G g(wg, tid, sm.base);
        const int c = g.c;
        float acc[H][S::ACC];
#pragma unroll
        for (int h = 0; h < H; ++h)
#pragma unroll
            for (int i = 0; i < S::ACC; ++i) acc[h][i] = 0.f;
        int stage = 0;
        u32 phase = 0;
        u32 c_parity = 0;   // C tiles staged so far (both warpgroups' in ping-pong), mod 2
        u32 order_par = 0;  // ping-pong: waits on this warpgroup's order barrier so far, mod 2
        u32 epi_par = 0;    // ping-pong: waits on this warpgroup's epi barrier so far, mod 2
        int unit = -1;
#pragma unroll 1
        for (Sm90Work w(t.tiles, sk_tiles, sk_split, t.KT, CLUSTER, sk_bounds); w.next();) {
            ++unit;
            const int part = w.part;
            const bool stages_c = w.s < t.tiles && part != kHeadTile && part != kTailPark;  // a C tile
            if (S::PINGPONG && (unit & 1) != c) {  // the other warpgroup's unit: step over its k-blocks
                const int pos = stage + (w.k1 - w.k0);
                phase ^= u32(pos / S::STAGES) & 1u;
                stage = pos % S::STAGES;
                c_parity ^= u32(stages_c);
                continue;
            }
            // Ping-pong: not before the other warpgroup has waited for every stage of the unit before
            // this one (then no stage of this unit can be a whole ring pass ahead of its barrier).
            if (S::PINGPONG && unit > 0) {
                mbar_wait(sm.bar_order + 8 * c, order_par);
                order_par ^= 1u;
            }
            const bool phantom = w.s >= t.tiles;
            int tm = 0, tn = 0;
            if (!phantom) t.raster.tile(w.s, tm, tn);
            const bool idle = phantom || (!S::PINGPONG && tm * S::BM + 64 * __shfl_sync(0xffffffffu, c, 0) >= t.M);
            // (table_row, add_slot and the ring's place: see the NOTES at the top.)
            const auto table_row = [&](int r) {
                return sm90_direct_row<S, Epi>(M, tm, comm_buf, row_offset, tiles_n, tn, N, r);
            };
            bits16* lane_row = nullptr;  // DIRECT_C with a row table or places: this lane's row of the tile
            if (S::DIRECT_C && (Epi::kRowTable || Epi::kPlaces) && stages_c)
                lane_row = table_row((g.lane >> 4) * 64 + g.warp * 16 + (g.lane & 15));
            if (Epi::kProbe && stages_c && g.lead) epi::probe_start(probe, tm, tn, t.tiles_n);
            const Sm90Ring<S::STAGES> ring =
                sm90_mainloop<S, CLUSTER, STREAM_K, T>(sm, g, {stage, phase}, acc, w, unit, idle, phantom, rank);
            stage = ring.stage;
            phase = ring.phase;
            if (S::PINGPONG && unit > 0) {
                mbar_wait(sm.bar_epi + 8 * c, epi_par);
                epi_par ^= 1u;
            }
            const auto pass_epilogue = [&]() {
                if (S::PINGPONG) mbar_arrive_pred<1>(sm.bar_epi + 8 * (c ^ 1), 0u, u32(tid == 0));
            };
            if (phantom) {
                pass_epilogue();
                continue;
            }
            if (part == kHeadTile || part == kTailPark) {
                sm90_publish_part<S>(g, acc, w, unit, sk_partial, sk_flag);
                pass_epilogue();
                continue;
            }
            const auto add_slot = [&](i64 i, bool assign) { sm90_add_slot<S>(g, acc, sk_partial, i, assign); };
            sm90_gather_parts<S>(g, add_slot, w, unit, sk_flag);
            hang_where(2 + c, unit, w.s, part, -2);
            mbar_wait(sm.bar_c_empty, c_parity ^ 1u);  // the store warps are done with the previous tile
            sm90_stage_c<S, STREAM_K, T, Epi>(sm, g, acc, t, C, ldc, tm, tn, lane_row);
            // Release (CTA scope): the store warps read C (DIRECT_C: signal) after this.
            mbar_arrive(sm.bar_c_full);
            c_parity ^= 1u;
            pass_epilogue();
        }
        hang_where(2 + c, unit, -1, -1, -9);  // done
    }
    // Cluster 2: the other CTA's last arrivals on this CTA's barriers land before either exits.
    if (CLUSTER > 1) cluster_sync();
}

}  // namespace fo
