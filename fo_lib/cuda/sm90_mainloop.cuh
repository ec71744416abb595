// The Hopper GEMM's consumer main loop: a consumer warpgroup (Sm90Warpgroup: who it is, its rows,
// its barriers) multiplies one unit's k-blocks from the operand ring (Sm90Ring: its place there)
// with wgmma.m64n{BN}k16, A and B from shared-memory descriptors, fp32 accumulators in registers.
//
//   * Cooperative: warpgroup c computes rows 64 c .. 64 c + 63 of every unit (H = 1 half).
//   * Ping-pong: warpgroup c computes whole tiles (both 64-row halves, H = 2), the units u with
//     u % 2 == c; it starts a unit's main loop only after the other has waited for every stage of
//     the unit before (order barriers: handed over once the other's last MMAs are issued, which then
//     queue ahead of this one's; docs/decisions.md, "Ping-pong hands the tensor cores over at issue,
//     by thread 0"), so their main loops alternate on the tensor cores and one's epilogue (and
//     stream-K fixup) runs under the other's MMAs.
//   * One k-block of MMAs stays in flight (wgmma.wait_group 1) where the ring has 4+ stages, and
//     always in ping-pong (kMmaInFlight; docs/decisions.md, "MMAs stay in flight where the ring has
//     four or more stages"); 3-stage rings wait for each k-block's MMAs (wgmma.wait_group 0).
//   * A walk: a warpgroup that has nothing to read in a unit (a cluster's phantom unit, a
//     cooperative warpgroup whose 64 rows all lie past M) still waits for and frees each stage, so
//     the ring's phases stay in step (docs/decisions.md, "A warpgroup without rows skips its MMAs,
//     and a walking warpgroup's warps meet").
#pragma once

#include "sm90_scheduler.cuh"
#include "sm90_shape.cuh"

namespace fo {

// A consumer warpgroup's place in the operand ring: the stage it reads next and the parity of that
// stage's phase. NOTES: the main loop takes it by value and returns it: a loop-carried local whose
// address a role takes is promoted to registers after the others, which reorders the kernel's
// registers (ptxas then allocates them otherwise).
template <int STAGES>
struct Sm90Ring {
    int stage;
    u32 phase;

    __device__ __forceinline__ void advance() {
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1u;
        }
    }
};

// A consumer warpgroup: its index c (0 or 1) and thread tid, the named barriers it meets on, and
// where its rows of A start in a stage.
template <class S, bool STREAM_K>
struct Sm90Warpgroup {
    // (Enumerators, as Sm90Shape's added constants.) H: 64-row halves per unit. kMmaInFlight: one
    // k-block of MMAs in flight, so the tensor cores do not drain at every k-block while the
    // warpgroup frees its stage and waits for the next: its stage is held a k-block longer, which
    // a ring of 4+ stages spares (ping-pong always does it: the other warpgroup's MMAs wait).
    // 3-stage rings (BN 224-256) keep the producer's whole lookahead and wait per k-block.
    enum : int { H = S::PINGPONG ? 2 : 1 };
    enum : bool { kMmaInFlight = S::PINGPONG || S::STAGES >= 4 };
    enum : u32 { bar_count = S::PINGPONG ? 128 : 256 };  // the threads of named barrier bar_id

    int c;         // consumer warpgroup 0 or 1
    int tid;       // thread in the warpgroup
    u32 bar_id;    // this warpgroup's (or both consumers') named barrier
    bool lead;     // flags, stamps
    u32 walk_bar;  // the named barrier of a walk (see the note at the top)
    int warp, lane;
    u32 desc_lo;   // stage 0's A; B is A_BYTES on
    u32 a_rows;    // this warpgroup's rows of A in a stage (ping-pong: the first half; the second is 64 rows on)

    __device__ __forceinline__ Sm90Warpgroup(int wg, int tid_, u32 base) {
        tid = tid_;
        // Shuffled so ptxas sees it warp-uniform: the ping-pong k-loop then builds its wgmma
        // descriptors on the uniform datapath (no R2UR). With a stream-K tail compiled in, the
        // uniform registers do not hold both and ptxas spills, so there it stays as it is
        // (docs/decisions.md, "The stream-K tail is compiled in, not a run-time switch").
        c = STREAM_K ? wg - 1 : __shfl_sync(0xffffffffu, wg - 1, 0);
        bar_id = S::PINGPONG ? 2 + c : 2;
        lead = S::PINGPONG ? tid == 0 : (c == 0 && tid == 0);
        walk_bar = S::PINGPONG ? 2 + c : 3 + c;
        warp = tid / 32;
        lane = tid % 32;
        desc_lo = sm90::desc_sw128_lo(base);
        // Shuffled so ptxas sees it warp-uniform where c is not (a stream-K tail compiled in).
        a_rows = S::PINGPONG ? 0 : __shfl_sync(0xffffffffu, c, 0) * (64 * S::BK * 2);
    }
};

// One stage of a walk: wait for it, meet (walk_bar: nothing else holds the warps together here, and
// a warp still waiting on the stage's full barrier when the producer has refilled it twice would
// wait on a later phase, for ever), free it by one arrival (`one`: thread 0's), in this CTA and,
// cluster 2, in the other.
template <class S, int CLUSTER, bool STREAM_K>
__device__ __forceinline__ void sm90_walk_stage(const Sm90Smem<S>& sm, const Sm90Warpgroup<S, STREAM_K>& g,
                                                Sm90Ring<S::STAGES>& ring, u32 rank, u32 one) {
    using namespace sm90;
    mbar_wait(sm.bar_full + 8 * ring.stage, ring.phase);
    bar_sync(g.walk_bar, 128);
    mbar_arrive_pred<CLUSTER>(sm.bar_empty + 8 * ring.stage, rank ^ 1u, one);
    ring.advance();
}

// The main loop of unit w (k-blocks [w.k0, w.k1)) into acc, from the ring's place `ring`; returns
// the place after it. `idle`: walk it instead (a phantom, or a cooperative warpgroup without rows),
// `unit`: its index in this CTA's sequence (the hang trap's).
// Ping-pong: hands the tensor cores to the other warpgroup once every stage of the unit has been
// waited for (its MMAs then queue behind this unit's last ones).
template <class S, int CLUSTER, bool STREAM_K, class T>
__device__ __forceinline__ Sm90Ring<S::STAGES> sm90_mainloop(const Sm90Smem<S>& sm,
                                                             const Sm90Warpgroup<S, STREAM_K>& g,
                                                             Sm90Ring<S::STAGES> ring,
                                                             float (&acc)[Sm90Warpgroup<S, STREAM_K>::H][S::ACC],
                                                             const Sm90Work& w, int unit, bool idle, bool phantom,
                                                             u32 rank) {
    using namespace sm90;
    using G = Sm90Warpgroup<S, STREAM_K>;
    constexpr int H = G::H, BN = S::BN, BK = S::BK;
    const int k0 = w.k0, part = w.part, c = g.c, tid = g.tid;
    if (G::kMmaInFlight) {
        // One k-block of MMAs in flight: k-block kb's stage is freed once kb + 1's are issued
        // and wgmma.wait_group 1 says kb's are done. No branch that is not uniform in here.
        const u32 one = tid == 0;
        const int nk = idle ? 0 : w.k1 - k0;  // a phantom or idle warpgroup keeps step below instead
        int prev = ring.stage;
        // Ping-pong: the other warpgroup's turn once this unit's last MMAs are issued (a phantom's
        // after its walk of the stages below).
        const bool order_at_issue = CLUSTER == 1 || !phantom;
#pragma unroll 1
        for (int i = 0; i < nk; ++i) {
            hang_where(2 + c, unit, w.s, part, k0 + i);
            mbar_wait_in_asm(sm.bar_full + 8 * ring.stage, ring.phase);
            const u32 at = ring.stage * S::STAGE_BYTES;
#pragma unroll
            for (int h = 0; h < H; ++h) fence_acc(acc[h]);
            wgmma_fence();
#pragma unroll
            for (int h = 0; h < H; ++h) {
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
                    Wgmma<BN>::mma(acc[h], desc_sw128_at(g.desc_lo, at + g.a_rows + h * (64 * BK * 2) + kk * 32),
                                   desc_sw128_at(g.desc_lo, at + S::A_BYTES + kk * 32), (i | kk) != 0, T{});
            }
            wgmma_commit();
            wgmma_wait<1>();
#pragma unroll
            for (int h = 0; h < H; ++h) fence_acc(acc[h]);
            mbar_arrive_pred<CLUSTER>(sm.bar_empty + 8 * prev, rank ^ 1u, one & u32(i > 0));
            prev = ring.stage;
            ring.advance();
        }
        // Every stage of this unit has been waited for, so the other warpgroup may start its
        // next unit now: its MMAs queue behind this unit's last ones, and the tensor cores do
        // not drain between the two warpgroups' units.
        if (S::PINGPONG && order_at_issue) mbar_arrive_pred<1>(sm.bar_order + 8 * (c ^ 1), 0u, one);
        wgmma_wait<0>();
#pragma unroll
        for (int h = 0; h < H; ++h) fence_acc(acc[h]);
        mbar_arrive_pred<CLUSTER>(sm.bar_empty + 8 * prev, rank ^ 1u, one & u32(nk > 0));
#pragma unroll 1
        for (int kb = idle ? k0 : w.k1; kb < w.k1; ++kb) {  // no MMAs here: keep step
            hang_where(2 + c, unit, w.s, part, 1000 + kb);
            sm90_walk_stage<S, CLUSTER>(sm, g, ring, rank, one);
        }
        // Every stage of this unit has been waited for: the other warpgroup may start its next.
        if (S::PINGPONG && !order_at_issue) mbar_arrive_pred<1>(sm.bar_order + 8 * (c ^ 1), 0u, one);
    } else {
#pragma unroll 1
        for (int kb = idle ? k0 : w.k1; kb < w.k1; ++kb) {  // no MMAs here: keep step
            hang_where(2 + c, unit, w.s, part, 1000 + kb);
            sm90_walk_stage<S, CLUSTER>(sm, g, ring, rank, u32(tid == 0));
        }
#pragma unroll 1
        for (int kb = k0; kb < (idle ? k0 : w.k1); ++kb) {
            hang_where(2 + c, unit, w.s, part, kb);
            mbar_wait(sm.bar_full + 8 * ring.stage, ring.phase);
            const u32 at = ring.stage * S::STAGE_BYTES;
            fence_acc(acc[0]);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                // scale_d = 0 on the part's first k16 step: D = A B^T, no zeroing pass needed.
                Wgmma<BN>::mma(acc[0], desc_sw128_at(g.desc_lo, at + g.a_rows + kk * 32),
                               desc_sw128_at(g.desc_lo, at + S::A_BYTES + kk * 32), ((kb - k0) | kk) != 0, T{});
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_acc(acc[0]);
            // wgmma.wait_group 0 means this warpgroup's MMAs (and their shared-memory reads of
            // the stage) are complete: one arrival per warpgroup frees the stage, in this CTA and
            // (cluster 2) in the other, whose producer multicasts into this stage too.
            if (tid == 0) {
                mbar_arrive(sm.bar_empty + 8 * ring.stage);
                if (CLUSTER > 1) mbar_arrive_remote(sm.bar_empty + 8 * ring.stage, rank ^ 1u);
            }
            ring.advance();
        }
    }
    return ring;
}

}  // namespace fo
