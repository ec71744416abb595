// The Hopper GEMM's stream-K fixup: the parts of a tile cut between CTAs (sm90_scheduler.cuh) meet
// through the workspace, and a flag per cut tile signals them (the counting-table protocol between
// CTAs: one thread's release add after a barrier, every warp's acquire by a vote).
//
//   * A part that does not finish its tile (kHeadTile: a run's head or a split tail's earlier k
//     range, to slot 2 b of sk_partial; kTailPark: a parked tail, to slot 2 b + 1) stores its fp32
//     accumulators, in register-fragment order. A head then releases the tile's flag (+1).
//   * The part that finishes it (kTailTile: a tail, kFinishParked: a parked tail's finish,
//     kSplitLast: a split tail's last k range) waits for the flag (a tail: CTA b - 1's head; the
//     split tail: sk_split - 1 parts), resets it for the next launch, adds the others' sums to its
//     registers (tail + head; the split tail latest k range first: deterministic) and runs the
//     tile's epilogue as usual, once (only the plain store has a tail: signalled GEMMs run whole
//     waves).
//
// A slot holds a part's accumulators as [half][i / 4][consumer thread][4] floats: each thread's
// float4s, coalesced across the warpgroup; every thread reads back only what it (or its twin in
// another CTA) wrote.
#pragma once

#include "sm90_mainloop.cuh"

namespace fo {

// Half `half` of slot i (i: 2 b a head or split part, 2 b + 1 a parked tail).
template <class S>
__device__ __forceinline__ float4* sm90_sk_slot(float* sk_partial, i64 i, int half) {
    return reinterpret_cast<float4*>(sk_partial + i * (S::BM * S::BN)) + half * (S::ACC / 4) * 128;
}

// acc = slot i (assign) or acc += slot i.
template <class S, bool STREAM_K>
__device__ __forceinline__ void sm90_add_slot(const Sm90Warpgroup<S, STREAM_K>& g,
                                              float (&acc)[Sm90Warpgroup<S, STREAM_K>::H][S::ACC], float* sk_partial,
                                              i64 i, bool assign) {
#pragma unroll
    for (int h = 0; h < Sm90Warpgroup<S, STREAM_K>::H; ++h) {
        const float4* src = sm90_sk_slot<S>(sk_partial, i, S::PINGPONG ? h : g.c);
#pragma unroll
        for (int q = 0; q < S::ACC / 4; ++q) {
            const float4 v = __ldcg(src + q * 128 + g.tid);  // .cg: at L2, where the other SM wrote
            acc[h][4 * q] = assign ? v.x : acc[h][4 * q] + v.x;
            acc[h][4 * q + 1] = assign ? v.y : acc[h][4 * q + 1] + v.y;
            acc[h][4 * q + 2] = assign ? v.z : acc[h][4 * q + 2] + v.z;
            acc[h][4 * q + 3] = assign ? v.w : acc[h][4 * q + 3] + v.w;
        }
    }
}

// kHeadTile, kTailPark: this part's accumulators to its slot; a head then releases the tile's flag.
template <class S, bool STREAM_K>
__device__ __forceinline__ void sm90_publish_part(const Sm90Warpgroup<S, STREAM_K>& g,
                                                  const float (&acc)[Sm90Warpgroup<S, STREAM_K>::H][S::ACC],
                                                  const Sm90Work& w, int unit, float* sk_partial, u32* sk_flag) {
    using namespace sm90;
    const int part = w.part;
    const i64 i = 2 * i64(blockIdx.x) + (part == kTailPark);
#pragma unroll
    for (int h = 0; h < Sm90Warpgroup<S, STREAM_K>::H; ++h) {
        float4* slot = sm90_sk_slot<S>(sk_partial, i, S::PINGPONG ? h : g.c);
#pragma unroll
        for (int q = 0; q < S::ACC / 4; ++q)
            __stcg(slot + q * 128 + g.tid,
                   make_float4(acc[h][4 * q], acc[h][4 * q + 1], acc[h][4 * q + 2], acc[h][4 * q + 3]));
    }
    if (part == kHeadTile) {
        // bar.sync orders every consumer's stores before thread 0's release (cumulative,
        // gpu scope): the finisher's acquire then sees the whole slot (the signal's protocol).
        hang_where(2 + g.c, unit, w.s, part, -4);
        bar_sync(g.bar_id, g.bar_count);
        red_release_gpu_add_if(g.lead, sk_flag + (w.s - w.dp), 1u);
    }
}

// kSplitLast, kTailTile, kFinishParked: the tile's other parts added to the consumer's accumulators
// once they are there; add_slot(i, assign) is sm90_add_slot on them (a closure of the kernel: see
// gemm_sm90.cuh's NOTES). Every warp polls, by a vote: a loop no lane leaves alone keeps the warps
// converged, and with them the main loop's descriptors in uniform registers (a lone thread's spin
// made ptxas move them through vector registers in every k-block: docs/decisions.md, "The k-loop
// steps its wgmma descriptors on the uniform datapath").
template <class S, bool STREAM_K, class AddSlot>
__device__ __forceinline__ void sm90_gather_parts(const Sm90Warpgroup<S, STREAM_K>& g, const AddSlot& add_slot,
                                                  const Sm90Work& w, int unit, u32* sk_flag) {
    using namespace sm90;
    const int part = w.part, dp = w.dp;
    if (part == kSplitLast) {
        // The tile's other parts are the first units of CTAs b - sk, b - 2 sk, ..., which
        // wait on nothing; added from the latest k range down (deterministic).
        hang_where(2 + g.c, unit, w.s, part, -3);
        const u64 t0 = FO_SM90_HANG_TRAP ? globaltimer_ns() : 0;
        bool told = false;
        while (!__all_sync(0xffffffffu, ld_acquire_gpu(sk_flag + (w.s - dp)) == u32(w.split - 1))) {
            if (FO_SM90_HANG_TRAP) hang_trap(t0, told, "split flag (tile, value)", w.s, ld_acquire_gpu(sk_flag + (w.s - dp)));
        }
        bar_sync(g.bar_id, g.bar_count);
        if (g.lead) sk_flag[w.s - dp] = 0u;  // ready for the next launch (every warp has seen it)
        for (int i = 1; i < w.split; ++i) add_slot(2 * i64(int(blockIdx.x) - i * w.sk), false);
    }
    if (part == kTailTile || part == kFinishParked) {
        if (part == kFinishParked) add_slot(2 * i64(blockIdx.x) + 1, true);  // the parked tail back
        // The head of this tile is the first unit of CTA b - 1's run.
        hang_where(2 + g.c, unit, w.s, part, -3);
        const u64 t0 = FO_SM90_HANG_TRAP ? globaltimer_ns() : 0;
        bool told = false;
        while (!__all_sync(0xffffffffu, ld_acquire_gpu(sk_flag + (w.s - dp)) != 0u)) {  // (as above)
            if (FO_SM90_HANG_TRAP) hang_trap(t0, told, "head flag (tile, part)", w.s, part);
        }
        bar_sync(g.bar_id, g.bar_count);
        if (g.lead) sk_flag[w.s - dp] = 0u;  // ready for the next launch (every warp has seen it)
        add_slot(2 * i64(blockIdx.x - 1), false);
    }
}

}  // namespace fo
