// Hopper (sm_90a) GEMM, C = A @ B^T ("NT"), with the FlashOverlap epilogues.
//
//   A: M x K row-major, B: N x K row-major (the nn.Linear weight), both read through 2-D TMA tensor
//   maps (128B swizzle, OOB zero fill: tails in M, N and K need no predication in the main loop).
//   C: M x N row-major (ldc). bf16 or fp16 in, fp32 accumulation, same 16-bit type out.
//
// Structure: one persistent CTA per SM, 384 threads = 3 warpgroups, tile 128 x BN x 64 (BN a multiple
// of 8 in [128, 256], of 16 in clusters: tile widths between 128 and 256 let a grid fill
// its last wave, as cuBLAS's 168-wide tile fills two waves of 1536 x 3584 on 132 SMs).
//   * WG 0 (producer, setmaxnreg.dec to 56 registers, ping-pong 40):
//       - warp 0, lane 0: TMA loads of A (128 x 64) and B (BN x 64) into a STAGES-deep ring guarded
//         by full/empty mbarriers; it runs ahead across tile boundaries.
//       - warps 1-3 ("store warps"): take a finished C tile from shared memory, store it to global
//         (C, or comm_buf through the row table), then publish it (signal / probe).
//   * WG 1 and WG 2 (consumers, setmaxnreg.inc to 224, ping-pong 232): rows 0-63 and 64-127 of the tile,
//     wgmma.m64n{BN}k16 with A and B from shared-memory descriptors, fp32 accumulators in registers.
//     After a tile's last k-block they write the accumulators (16-bit) to the C staging tile and go
//     straight on to the next tile: the global stores, the fence and the atomic are off their path.
//   * DIRECT_C: no C staging tile. Each consumer warp takes its 16 rows through two 16 x 64 buffers
//     of its own (stmatrix, then 16-byte stores of 4 rows x 128 bytes per warp instruction) to global
//     memory itself; the store warps only publish the tile. The 32 KB of buffers in place of the
//     58-64 KB tile give BN 224-256 a fourth stage (and so MMAs in flight), which pays on grids of
//     few waves, whose operands stream from DRAM; on many waves the stores on the consumers' path
//     cost more than the stage brings. With ping-pong consumers (a warp takes its 16 rows of both
//     halves) the stores run under the other warpgroup's MMAs, and BN 168-176 gets a fifth stage,
//     as cuBLAS's non-cooperative 168- and 176-wide kernels have. (The row-offset area stays
//     reserved, unused.)
//   * Tile schedule: CTA b of P runs s = b, b + P, ... through fo::raster_tile (tile_schedule.cuh),
//     the same function as the portable kernel, so fo_lib.tiling's wave model holds.
//   * Clusters (CLUSTER 2): P is even, so cluster ranks 0 and 1 run schedule indices 2 i and
//     2 i + 1 in step. When both are tiles of one tile column (a row raster with an even swizzle
//     pairs every tile but an odd edge band's) they share the B tile: each producer loads its A and
//     one half of B, multicast into both CTAs' stage at the same offset. When both are tiles of one
//     tile row (a column raster with an even swizzle, an odd edge band, most pairs of a row raster
//     of swizzle 1) they share A the same way. Both operands' tensor maps have half-tile boxes
//     here. A stage may be refilled only when the consumers of both CTAs are done with it (each
//     consumer warpgroup arrives on both CTAs' empty barrier). Unshared pairs load their whole
//     tiles themselves under the same handshake. An odd tile count gives the CTA paired with the
//     last tile's a phantom unit (schedule index s == tiles: no loads, no MMA, no store) so both
//     CTAs walk the same k-blocks; no stream-K tail in clusters.
//   * Split tail (sk_split >= 2, sk_tiles * sk_split <= P; fo_lib.gemm.stream_k.stream_k_plan): each of the
//     last sk_tiles tiles (the partial last wave) runs as sk_split k ranges on as many CTAs, all
//     starting together after the whole tiles; the other parts go to slot 2 b of sk_partial and add 1
//     to the tile's flag, the last range waits for sk_split - 1, adds them (latest k range first:
//     deterministic) and runs the epilogue.
//   * Stream-K runs (sk_split 1, P <= sk_tiles < 2 P, else ignored): the last sk_tiles schedule indices are not
//     given out whole but as one run of sk_tiles * KT k-blocks split evenly over the P CTAs (or, with
//     sk_bounds, CTA b's run is k-blocks [sk_bounds[b], sk_bounds[b + 1]), each at least KT long: the
//     host's runs of unequal length where tiles cost unequal time, fo_lib.gemm.stream_k.stream_k_weighted), each
//     CTA's run after its whole tiles (a partial last wave would leave SMs idle; here every CTA does
//     the same work). A run is longer than a tile, so a cut tile has two parts: its head (k-block 0
//     on, the end of CTA b's run) and its tail (up to its last k-block, the start of CTA b + 1's).
//     Each CTA runs its head first, then its tail, then its whole tiles: every CTA starts at
//     k-block 0 at the same moment, so many CTAs read the same operand slabs at once and L2 serves
//     them (in run order each CTA would start at its own k and every slab would come from DRAM;
//     after the heads the offsets spread again, less than in run order). The head
//     writes its fp32 accumulators, in register-fragment order, to slot 2 b of sk_partial and
//     releases sk_flag[t]. The tail's CTA finishes the tile: at once, adding the head to its
//     registers, when the head (CTA b - 1's first unit) is due before this tail ends; otherwise it
//     parks the tail in slot 2 b + 1 and finishes the tile after its whole tiles, from both slots, so
//     no CTA idles on a head and no CTA waits on one that waits. Either way the sum is tail + head
//     (deterministic) and the tile's normal epilogue runs once (signal included); the finishing
//     CTA resets the flag for the next launch. A CTA waits only on CTA b - 1's head, which waits on
//     nothing: CTA b - 1 must be running no later than CTA b (blocks are dispatched in index order,
//     and the persistent grid fits the GPU).
//   * Both tails are compiled in only where the config asks for one (STREAM_K, a single CTA): their
//     code kept the consumers' loop state out of uniform registers, so every other kernel runs
//     without it (sk_tiles is then ignored).
//
// Ping-pong (PINGPONG): the two consumer warpgroups take turns, warpgroup c computing whole tiles
// (both 64-row halves) of the units u with u % 2 == c; it starts a unit's main loop only after the
// other has waited for every stage of the unit before (order barriers: handed over once the other's
// last MMAs are issued, which then queue ahead of this one's), so their main loops alternate on the
// tensor cores and one's epilogue (and stream-K fixup) runs under the other's MMAs;
// each keeps one k-block of MMAs in flight (wgmma.wait_group 1). The producer and the store warps
// walk the units as before. Cooperative consumers keep one in flight too where the ring has 4+
// stages (kMmaInFlight); with fewer they wait for each k-block's MMAs (wgmma.wait_group 0).
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
//   order[c]  : ping-pong, 1 arrival (the other consumer WG, once its unit's last MMAs are issued;
//               a phantom's after its walk of the stages; FO_SM90_ORDER_AT_ISSUE=0: once they are done)
//   epi[c]    : ping-pong, 1 arrival (the other consumer WG, after staging its unit's C tile, or
//               passing a unit without one); FO_SM90_HANDOVER_ALL=1: order and epi 128 arrivals,
//               every thread of the other WG
//   named barrier 1: the 96 store threads; named barrier 2: the 256 consumer threads (stream-K;
//   ping-pong: 2 + c, the 128 threads of consumer warpgroup c); 3 + c (ping-pong: 2 + c): the 128
//   threads of consumer warpgroup c at each stage of a walk without reads (a phantom unit, a
//   warpgroup without rows), before the one arrival that frees it.
//   CLUSTER 2: a cluster barrier after the barriers are initialised (the other CTA multicasts into
//   this one's ring) and one before exit (its last arrivals on this CTA's barriers).
// NOTES: smem C is written and read by the generic proxy only (st.shared / ld.shared), and the operand
// ring by the async proxy only (TMA writes, wgmma reads), so no fence.proxy.async is needed anywhere.
//
// EPILOGUE 0 plain, 1 signal (comm_buf through row_offset, then red.release.gpu on the tile's group
// counter), 2 probe (plain + per-tile start/end %globaltimer, smid, CTA), 3 scatter (table store, no
// signal), 4 signal_rows (plain row-major store, then the signal), 5 signal_tiles (each tile at its
// place from tile_place, then the signal) -- the same meaning and arguments as gemm_mma.cuh (the
// order of fo_lib.gemm.config.EPILOGUES).
#pragma once

#include "common.cuh"
#include "tile_schedule.cuh"

// A/B switch (FO_NVRTC_OPTIONS=-DFO_SM90_SHARE_A=0): cluster pairs on one tile row load A each for
// itself (as before A was shared too, but in two half boxes), as pairs that share nothing.
// A/B switch (FO_NVRTC_OPTIONS=-DFO_SM90_IDLE_WG=0): a cooperative warpgroup without rows in a tile
// computes its MMAs anyway (as before the skip).
#ifndef FO_SM90_IDLE_WG
#define FO_SM90_IDLE_WG 1
#endif
#ifndef FO_SM90_SHARE_A
#define FO_SM90_SHARE_A 1
#endif
// Test hooks of the walks without reads (walk_bar): FO_SM90_WALK_LAG_NS=N makes the warpgroup's last
// warp sleep N ns before each of its waits there; FO_SM90_WALK_MEET=0 drops the meeting. A GPU test
// runs a late warp with the meeting (it must finish, correct) and without (the hang trap must fire).
// FO_SM90_ORDER_LAG_NS=N: ping-pong warps 1-3 sleep N ns before each wait on their order barrier
// (thread 0 hands the turn over once its MMAs are issued; a GPU test checks no warp is left behind).
#ifndef FO_SM90_WALK_LAG_NS
#define FO_SM90_WALK_LAG_NS 0
#endif
#ifndef FO_SM90_ORDER_LAG_NS
#define FO_SM90_ORDER_LAG_NS 0
#endif
// A/B switch (FO_NVRTC_OPTIONS=-DFO_SM90_HANDOVER_ALL=1): ping-pong's order and epi barriers count
// all 128 threads of a warpgroup, each arriving when it hands over, instead of thread 0 alone (then
// no warp can still be before its own wait on the barrier the other warpgroup completes next).
// Thread 0 alone is enough: the warpgroup's next MMAs, a warpgroup instruction, wait for its late
// warps, and the other warpgroup's next turn waits for those MMAs (the late-warp test passes both).
#ifndef FO_SM90_HANDOVER_ALL
#define FO_SM90_HANDOVER_ALL 0
#endif
#ifndef FO_SM90_WALK_MEET
#define FO_SM90_WALK_MEET 1
#endif
// A/B switch (FO_NVRTC_OPTIONS=-DFO_SM90_ORDER_AT_ISSUE=0): ping-pong hands the tensor cores to the
// other warpgroup after its last k-block's MMAs are issued (1) or done (0).
#ifndef FO_SM90_ORDER_AT_ISSUE
#define FO_SM90_ORDER_AT_ISSUE 1
#endif

namespace fo {

// The driver's CUtensorMap (cuTensorMapEncodeTiled): 128 opaque bytes, 64-byte aligned. Kernels take
// it by value as a `const __grid_constant__` parameter so TMA can read it from parameter space.
struct alignas(64) TmaDesc {
    unsigned long long opaque[16];
};

namespace sm90 {

__device__ __forceinline__ u32 smem_u32(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// --- mbarrier ------------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Arrive (release, CTA scope) and announce `bytes` of TMA traffic that completes this phase too.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// True once the phase with parity `parity` has completed (acquire, CTA scope). A fresh barrier is in
// phase 0, so waiting for parity 1 returns at once: that is how the first pass over `empty` works.
__device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
    u32 ok;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
    return ok != 0;
}
// Diagnosis (FO_NVRTC_OPTIONS=-DFO_SM90_HANG_TRAP=1): a wait that lasts 1 s prints where it waits
// (lane 0 of each waiting warp, once) with where each role of the CTA is (hang_where: producer, store
// warps, consumer warpgroups 0 and 1: unit, schedule index, part, k-block), and at 4 s traps, so a
// launch that would hang fails instead (off by default: the spins stay bare).
#ifndef FO_SM90_HANG_TRAP
#define FO_SM90_HANG_TRAP 0
#endif
#if FO_SM90_HANG_TRAP
__shared__ int hang_where_[16];
#endif
__device__ __forceinline__ void hang_where(int role, int unit, int s, int part, int kb) {
#if FO_SM90_HANG_TRAP
    if (threadIdx.x % 32 == 0) {
        volatile int* w = hang_where_ + 4 * role;
        w[0] = unit;
        w[1] = s;
        w[2] = part;
        w[3] = kb;
    }
#endif
}
__device__ __forceinline__ void hang_trap(u64 t0, bool& told, const char* what, unsigned a, unsigned b) {
#if FO_SM90_HANG_TRAP
    const u64 dt = globaltimer_ns() - t0;
    if (!told && dt > 1000000000ull) {
        told = true;
        const volatile int* w = hang_where_;
        if (threadIdx.x % 32 == 0)
            printf("fo_sm90 hang: block %d warp %d waits on %s %u %u | producer %d %d %d %d | store %d %d %d %d"
                   " | wg0 %d %d %d %d | wg1 %d %d %d %d\n", int(blockIdx.x), int(threadIdx.x / 32), what, a, b,
                   w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11], w[12], w[13], w[14], w[15]);
    }
    if (dt > 4000000000ull) __trap();
#endif
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    const u64 t0 = FO_SM90_HANG_TRAP ? globaltimer_ns() : 0;
    bool told = false;
    while (!mbar_try_wait(bar, parity)) {
        if (FO_SM90_HANG_TRAP) hang_trap(t0, told, "mbarrier (smem address, parity)", bar, parity);
    }
}
// NOTES: while a warpgroup's wgmma is in flight (kMmaInFlight keeps one k-block's), a C++ branch that
// ptxas cannot prove uniform (a spin loop, `if (tid == 0)`) makes it serialize every wgmma (C7518).
// These keep the loop and the predicate inside one asm statement each (labels are scoped to the
// braces, so the statement may be inlined many times).
__device__ __forceinline__ void mbar_wait_in_asm(u32 bar, u32 parity) {
    if (FO_SM90_HANG_TRAP) {
        mbar_wait(bar, parity);
        return;
    }
    asm volatile(
        "{\n .reg .pred p;\n WAIT:\n"
        " mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra WAIT;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// mbar_arrive (and, cluster 2, mbar_arrive_remote to CTA `other`) where pred is nonzero.
template <int CLUSTER>
__device__ __forceinline__ void mbar_arrive_pred(u32 bar, u32 other, u32 pred) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %1, 0;\n"
        " @p mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar),
        "r"(pred)
        : "memory");
    if (CLUSTER > 1) {
        asm volatile(
            "{\n .reg .pred p;\n .reg .b32 ra;\n setp.ne.b32 p, %2, 0;\n mapa.shared::cluster.u32 ra, %0, %1;\n"
            " @p mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
            "r"(other), "r"(pred)
            : "memory");
    }
}

// --- TMA -----------------------------------------------------------------------------------------
__device__ __forceinline__ void prefetch_tma_desc(const TmaDesc& desc) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(&desc)) : "memory");
}
// One box of a 2-D tensor map into shared memory; completes `bytes` (the full box, zero-filled
// where it is out of bounds) on the mbarrier. c0 = innermost (K) coordinate, c1 = row.
__device__ __forceinline__ void tma_load_2d(u32 dst, const TmaDesc& desc, u32 bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
            dst),
        "l"(reinterpret_cast<u64>(&desc)), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
}

// The same box into this CTA's and the other cluster CTAs' shared memory at the same offsets
// (`mask`: one bit per destination CTA rank); completes its bytes on each destination's mbarrier at
// `bar`'s offset.
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const TmaDesc& desc, u32 bar, int c0, int c1,
                                                      unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%4, %5}], [%2], %3;" ::"r"(dst),
        "l"(reinterpret_cast<u64>(&desc)), "r"(bar), "h"(mask), "r"(c0), "r"(c1)
        : "memory");
}

// --- clusters ------------------------------------------------------------------------------------
__device__ __forceinline__ u32 cluster_ctarank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Every thread of every CTA in the cluster; release/acquire at cluster scope.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
// Arrive on the mbarrier at the same offset as `bar` in cluster CTA `rank` (the default semantics,
// release at CTA scope, as CUTLASS's ClusterBarrier: it only tells the other CTA's producer that this
// warpgroup's wgmma reads of a stage are complete, and a cluster-scope release on every k-block
// made each k-block wait for it).
__device__ __forceinline__ void mbar_arrive_remote(u32 bar, u32 rank) {
    asm volatile(
        "{\n .reg .b32 ra;\n mapa.shared::cluster.u32 ra, %0, %1;\n"
        " mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
        "r"(rank)
        : "memory");
}

// --- wgmma ---------------------------------------------------------------------------------------
// Shared-memory matrix descriptor of a K-major operand in the 128B-swizzle canonical layout that a
// TMA box of 64 16-bit elements x rows produces: rows of 128 bytes, 8-row (1024-byte) swizzle atoms
// stacked along M/N. Fields: start address >> 4 (bits 0-13), leading byte offset >> 4 (bits 16-29;
// unused for swizzled K-major, 1 by convention), stride byte offset >> 4 (bits 32-45; 1024 B between
// 8-row atoms), base offset (bits 49-51; 0: every atom starts 1024-aligned), swizzle (bits 62-63;
// 1 = 128B). The k16 step inside the 128-byte row is +32 bytes on the start address: the hardware
// applies the swizzle to the absolute address, so base offset stays 0.
// The low word (start address, leading byte offset) of desc_sw128(smem_addr); the high word is the
// same for every operand and stage.
__host__ __device__ constexpr u32 desc_sw128_lo(u32 smem_addr) {
    return ((smem_addr & 0x3FFFF) >> 4) | (u32(16 >> 4) << 16);
}
constexpr u32 kDescSw128Hi = (1024 >> 4) | (1u << 30);
__host__ __device__ constexpr u64 desc_sw128(u32 smem_addr) {
    return u64(desc_sw128_lo(smem_addr)) | (u64(kDescSw128Hi) << 32);
}
// desc_sw128(addr + bytes) from desc_sw128_lo(addr) = lo: an add on the start-address field, which
// cannot carry out of its 14 bits while addr + bytes < 256 KB (a CTA's shared window is smaller).
// The kernel keeps one low word for its operands (a register, where two 64-bit descriptors would
// spill) and steps it per stage and k16 step with this.
__host__ __device__ constexpr u64 desc_sw128_at(u32 lo, u32 bytes) {
    return u64(lo + (bytes >> 4)) | (u64(kDescSw128Hi) << 32);
}
static_assert(desc_sw128_at(desc_sw128_lo(1024), 4 * 49152 + 96) == desc_sw128(1024 + 4 * 49152 + 96) &&
                  desc_sw128_at(desc_sw128_lo(0x38000), 0x3FF0) == desc_sw128(0x3BFF0),
              "a descriptor stepped by adds is the descriptor of the stepped address");

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// NOTES: wgmma writes the accumulators asynchronously, behind the compiler's back. An empty asm
// that "reads and writes" every accumulator after wgmma.wait_group (and before wgmma.fence) keeps
// the compiler from moving ordinary uses of them across the wait.
template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64 x BN, fp32) = A (64 x 16, smem desc) * B^T (BN x 16, smem desc) + (scale_d ? D : 0), both
// operands K-major, as Wgmma<BN>::mma(d, desc_a, desc_b, scale_d, type tag). wgmma takes its BN / 2
// accumulators per thread as as many asm operands, so each width is a statement of its own: the
// kernel's instantiation source defines the one it needs (fo_lib/gemm/wgmma.py).
template <int BN>
struct Wgmma;

// --- misc ----------------------------------------------------------------------------------------
template <int R>
__device__ __forceinline__ void regs_dealloc() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void regs_alloc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
// Named barrier over `count` threads (whole warps); id 0 is __syncthreads.
__device__ __forceinline__ void bar_sync(u32 id, u32 count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
// The shared/global accessors below shadow fo::'s (gemm_mma.cuh) on purpose: here the C tile is
// handed between warps by mbarriers and named barriers, so every access carries a "memory" clobber
// that keeps the compiler from moving it across them. The portable kernel orders its accesses with
// __syncthreads and keeps its accessors clobber-free (its code generation is tuned with them).
__device__ __forceinline__ void st_shared_s64(u32 addr, i64 v) {
    asm volatile("st.shared.s64 [%0], %1;" ::"r"(addr), "l"(v) : "memory");
}
__device__ __forceinline__ i64 ld_shared_s64(u32 addr) {
    i64 v;
    asm volatile("ld.shared.s64 %0, [%1];" : "=l"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void ld_shared_v4(u32 addr, u32 (&v)[4]) {
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void st_global_v4(void* p, const u32 (&v)[4]) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
                 : "memory");
}

// Four 8 x 8 16-bit matrices to shared memory: lane l gives the address of row l % 8 of matrix l / 8;
// register i holds this lane's pair of matrix i in the mma fragment layout (row l / 4, columns
// 2 (l % 4), + 1): one instruction for what takes four st.shared.b32.
__device__ __forceinline__ void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3)
                 : "memory");
}
// Two 8 x 8 matrices (lanes 0-15 give the addresses): the last 8 columns of a tile whose width is an
// odd number of 8-column blocks.
__device__ __forceinline__ void stmatrix_x2(u32 addr, u32 r0, u32 r1) {
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};" ::"r"(addr), "r"(r0), "r"(r1) : "memory");
}

}  // namespace sm90

// What a CTA does with one unit of work (see the stream-K note at the top).
// kWholeTile: every k-block; kHeadTile: published to slot 2 b; kTailTile: finished in registers with
// the head; kTailPark: parked in slot 2 b + 1; kFinishParked: no k-blocks, tail slot + head slot;
// kSplitLast: the split tail's last k range, finished with the tile's other parts.
enum Sm90Part : int { kWholeTile = 0, kHeadTile = 1, kTailTile = 2, kTailPark = 3, kFinishParked = 4, kSplitLast = 5 };

// The stream-K run of CTA b of P over sk_tiles x KT k-blocks: [first(b), first(b + 1)).
__device__ __forceinline__ i64 sk_first(i64 total, int b, int P) { return total * b / P; }

// The units of this CTA in order: its whole tiles s = b, b + P, ... below tiles - sk_tiles (cluster 2:
// below the tile count rounded up to even, s == tiles being the phantom unit), then either its part
// of the split tail (one k range of one tail tile) or its stream-K run [first(b), first(b + 1)) cut
// at tile boundaries: head, tail, whole tiles, and the parked tail's finish (k-blocks [k0, k1) of
// tile s). Producer, consumers and store warps each walk this same sequence:
// for (Sm90Work w(...); w.next();).
struct Sm90Work {
    int dp, KT, P, s_next;
    int sk, split;         // split tail: the last sk tiles, each in `split` k ranges (split 0: runs or none)
    int phase;             // 0 whole tiles before the run, 1 head, 2 tail, 3 whole tiles of the run, 4 finish, 5 done
    int t_head, head_len;  // the head: k-blocks [0, head_len) of sk tile t_head (head_len 0: none)
    int t_tail, tail_k0;   // the tail: k-blocks [tail_k0, KT) of sk tile t_tail (tail_k0 0: none)
    int t_whole, t_end;    // the run's whole tiles [t_whole, t_end)
    bool park;             // the tail ends before CTA b - 1's head is due: finish it last
    int s, k0, k1, part;   // the current unit

    // cluster 2: no stream-K (the two CTAs of a cluster walk k-blocks in lockstep: their kernels have
    // no STREAM_K, so sk_tiles is 0 here), and an odd tile count gets one phantom unit (s == tiles:
    // no tile) so both CTAs walk the same number of units.
    // sk_split >= 2: the split tail (CTA b < sk_tiles * split runs k range b / sk_tiles of tile
    // b % sk_tiles of the tail); 1: runs; the host's contract is fo_lib.gemm.stream_k.stream_k_plan.
    __device__ __forceinline__ Sm90Work(int tiles, int sk_tiles, int sk_split, int KT_, int cluster = 1,
                                        const i64* bounds = nullptr) {
        P = gridDim.x;
        split = 0;
        if (sk_split >= 2) {
            if (sk_tiles > 0 && sk_tiles < P && sk_tiles * sk_split <= P && sk_split <= KT_) split = sk_split;
            else sk_tiles = 0;
        } else if (sk_tiles < P || sk_tiles >= 2 * P) {
            sk_tiles = 0;
        }
        sk = sk_tiles;
        dp = cluster > 1 ? (tiles + 1) & ~1 : tiles - sk_tiles;
        KT = KT_;
        s_next = blockIdx.x;
        phase = 0;
        const i64 total = split ? 0 : i64(sk_tiles) * KT;  // the runs (none in the split tail)
        const bool given = bounds != nullptr && total > 0;   // the host's runs of unequal length
        const i64 g0 = given ? bounds[blockIdx.x] : sk_first(total, blockIdx.x, P);
        const i64 g1 = given ? bounds[blockIdx.x + 1] : sk_first(total, blockIdx.x + 1, P);
        t_end = int(g1 / KT);
        head_len = int(g1 - i64(t_end) * KT);
        t_head = t_end;
        t_tail = int(g0 / KT);
        tail_k0 = int(g0 - i64(t_tail) * KT);
        t_whole = tail_k0 ? t_tail + 1 : t_tail;
        // CTA b - 1's head (tail_k0 k-blocks, its first unit) against this tail's end, both counted
        // from the start of the runs (all CTAs start them together after the same whole tiles).
        park = tail_k0 != 0 && head_len + (KT - tail_k0) < tail_k0;
    }
    // Makes (s_, k0_, k1_, part_) the current unit.
    __device__ __forceinline__ bool unit(int s_, int k0_, int k1_, int part_) {
        s = s_;
        k0 = k0_;
        k1 = k1_;
        part = part_;
        return true;
    }
    __device__ __forceinline__ bool next() {
        if (phase == 0) {
            if (s_next < dp) {
                s_next += P;
                return unit(s_next - P, 0, KT, kWholeTile);
            }
            phase = 1;
        }
        if (phase == 1 && split) {  // the split tail: at most one part per CTA
            phase = 5;
            const int b = blockIdx.x;
            if (b >= sk * split) return false;
            const int j = b / sk;
            return unit(dp + (b - j * sk), j * KT / split, (j + 1) * KT / split, j + 1 < split ? kHeadTile : kSplitLast);
        }
        if (phase == 1) {
            phase = 2;
            if (head_len) return unit(dp + t_head, 0, head_len, kHeadTile);
        }
        if (phase == 2) {
            phase = 3;
            if (tail_k0) return unit(dp + t_tail, tail_k0, KT, park ? kTailPark : kTailTile);
        }
        if (phase == 3) {
            if (t_whole < t_end) return unit(dp + t_whole++, 0, KT, kWholeTile);
            phase = 4;
        }
        if (phase == 4) {
            phase = 5;
            if (park) return unit(dp + t_tail, KT, KT, kFinishParked);
        }
        return false;
    }
};

template <int BN, int STAGES, bool PINGPONG = false, bool DIRECT_C = false>
struct Sm90Shape {
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
    // DIRECT_C: no C tile; each consumer warp stages its 16 rows (of each half, ping-pong) through
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

    // Shared address of 16-byte chunk ch of row r of the C staging tile at smem_c.
    static __device__ __forceinline__ u32 c_chunk(u32 smem_c, int r, int ch) {
        return smem_c + r * C_ROW_BYTES + ((C_SWIZZLED ? (ch ^ (r & 7)) : ch) << 4);
    }
    // DIRECT_C: chunk ch (0-7) of row r (0-15) of a warp's buffer at buf.
    static __device__ __forceinline__ u32 warp_c_chunk(u32 buf, int r, int ch) {
        return buf + r * 128 + ((ch ^ (r & 7)) << 4);
    }
};

// The accumulator blocks j and j + 1 of a wgmma m64nNk16 fragment (both row halves), 16-bit, by one
// stmatrix x4 at this lane's address (see the epilogues for the lane-to-row mapping).
template <class T, int N>
__device__ __forceinline__ void stmatrix_acc(u32 addr, const float (&acc)[N], int j) {
    sm90::stmatrix_x4(addr, pack2(T{}, acc[4 * j], acc[4 * j + 1]), pack2(T{}, acc[4 * j + 2], acc[4 * j + 3]),
                      pack2(T{}, acc[4 * j + 4], acc[4 * j + 5]), pack2(T{}, acc[4 * j + 6], acc[4 * j + 7]));
}
// Block j alone (both row halves; lanes 0-15's addresses): the last block of an odd count.
template <class T, int N>
__device__ __forceinline__ void stmatrix_acc_last(u32 addr, const float (&acc)[N], int j) {
    sm90::stmatrix_x2(addr, pack2(T{}, acc[4 * j], acc[4 * j + 1]), pack2(T{}, acc[4 * j + 2], acc[4 * j + 3]));
}

// One 16-byte chunk v of a C row to dst, of which n elements lie inside the tile (a partial or
// unaligned chunk goes element by element).
__device__ __forceinline__ void store_c_chunk(bits16* dst, const u32 (&v)[4], int n) {
    if (n >= 8 && (reinterpret_cast<unsigned long long>(dst) & 15) == 0) {
        sm90::st_global_v4(dst, v);
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
            if (e < n) dst[e] = bits16(v[e >> 1] >> ((e & 1) * 16));
    }
}

// Element offset of row r of a tile placed at (base, sub_stride, shift) with `cols` columns
// (EPILOGUE 5; the portable kernel's layout).
__device__ __forceinline__ i64 placed_row(i64 base, i64 sub_stride, int shift, int r, int cols) {
    return base + i64(r >> shift) * sub_stride + i64(u32(r) & ((1u << shift) - 1u)) * cols;
}

// Pointers an epilogue does not use may be null.
template <int BN, int STAGES, int CLUSTER, bool PINGPONG, class T, int EPILOGUE, bool DIRECT_C = false,
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
    static_assert(EPILOGUE >= 0 && EPILOGUE <= 5,
                  "EPILOGUE is 0 plain, 1 signal, 2 probe, 3 scatter, 4 signal_rows or 5 signal_tiles");
    // Without STREAM_K the tail's code folds away (as in clusters), and with it the values that kept
    // ptxas from holding the consumers' loop state in uniform registers.
    if (!STREAM_K) sk_tiles = 0;
    constexpr bool kTableStore = EPILOGUE == 1 || EPILOGUE == 3;
    constexpr bool kPlaced = EPILOGUE == 5;  // tile places, as in gemm_mma.cuh
    constexpr bool kSignal = EPILOGUE == 1 || EPILOGUE == 4 || EPILOGUE == 5;
    constexpr int BM = S::BM, BK = S::BK;

    extern __shared__ unsigned char fo_sm90_smem[];
    // NOTES: 128B-swizzled TMA boxes and wgmma descriptors assume 1024-byte aligned atoms; the
    // dynamic shared window is not promised to start there, so align up (SMEM_BYTES has the slack).
    const u32 base = (smem_u32(fo_sm90_smem) + 1023u) & ~1023u;
    const u32 smem_c = base + STAGES * S::STAGE_BYTES;
    const u32 smem_ro = smem_c + S::C_BYTES;
    const u32 bar_full = smem_ro + S::RO_BYTES;  // full[s] = bar_full + 8 s
    const u32 bar_empty = bar_full + 8 * STAGES;
    const u32 bar_c_full = bar_empty + 8 * STAGES;
    const u32 bar_c_empty = bar_c_full + 8;
    const u32 bar_order = bar_c_empty + 8;  // ping-pong: order[c] = bar_order + 8 c (main loops)
    const u32 bar_epi = bar_order + 16;     // ping-pong: epi[c] = bar_epi + 8 c (C staging)

    const int tiles_m = (M + BM - 1) / BM;
    const int tiles_n = (N + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n;
    const TileRaster raster(tiles_m, tiles_n, order, swizzle);  // schedule index -> tile
    const int KT = (K + BK - 1) / BK;  // the last k-block's columns past K are zero-filled by TMA
    const int wg = threadIdx.x / 128;
    const int tid = threadIdx.x % 128;

    if (threadIdx.x == 0) {
        prefetch_tma_desc(tma_a);
        prefetch_tma_desc(tma_b);
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(bar_full + 8 * s, 1);
            // each consumer WG (ping-pong: the one whose unit it holds) of each cluster CTA
            mbar_init(bar_empty + 8 * s, (PINGPONG ? 1 : 2) * CLUSTER);
        }
        mbar_init(bar_c_full, PINGPONG ? 128 : 256);  // every thread of the warpgroup(s) computing a tile
        if (PINGPONG) {
#pragma unroll
            for (int i = 0; i < 4; ++i) mbar_init(bar_order + 8 * i, FO_SM90_HANDOVER_ALL ? 128 : 1);  // order[0..1], epi[0..1]
        }
        mbar_init(bar_c_empty, S::STORE_THREADS);
        // Make the initialised barriers visible to the async proxy (TMA complete_tx) as well.
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    // The other CTA multicasts into this one's ring and arrives on its barriers: not before they exist.
    if (CLUSTER > 1) cluster_sync();
    const u32 rank = CLUSTER > 1 ? cluster_ctarank() : 0u;

    if (wg == 0) {
        // ----------------------------------------------------------------- producer warpgroup
        regs_dealloc<S::PRODUCER_REGS>();
        const int warp = tid / 32;
        const int lane = tid % 32;
        if (warp == 0) {
            if (lane == 0) {
                int stage = 0;
                u32 phase = 0;
#pragma unroll 1
                for (Sm90Work w(tiles, sk_tiles, sk_split, KT, CLUSTER, sk_bounds); w.next();) {
                    const bool phantom = w.s >= tiles;  // cluster 2, odd tile count: no tile
                    int tm = 0, tn = 0;
                    if (!phantom) raster.tile(w.s, tm, tn);
                    // Cluster 2: CTA ranks 0 and 1 run schedule indices 2 i and 2 i + 1 (P is even); when
                    // both are tiles of one tile column they share B, of one tile row A, and each loads
                    // half of the shared tile for both.
                    bool share_a = false, share_b = false;
                    if (CLUSTER > 1 && !phantom && (w.s ^ 1) < tiles) {
                        int pm, pn;
                        raster.tile(w.s ^ 1, pm, pn);
                        share_b = pn == tn;
                        share_a = FO_SM90_SHARE_A && pm == tm;
                    }
#pragma unroll 1
                    for (int kb = w.k0; kb < w.k1; ++kb) {
                        const u32 empty = bar_empty + 8 * stage;
                        hang_where(0, stage, w.s, w.part, kb);
                        mbar_wait(empty, phase ^ 1u);
                        const u32 full = bar_full + 8 * stage;
                        const u32 dst = base + stage * S::STAGE_BYTES;
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
                        if (++stage == STAGES) {
                            stage = 0;
                            phase ^= 1u;
                        }
                    }
                }
                hang_where(0, 0, -1, -1, -9);  // done
            }
        } else {
            // Store warps: pass g of store warp sw (g = sw, sw + 3, ...) covers the tile's 16-byte
            // chunks 32 g .. 32 g + 31 in row-major order, one per lane: a warp store writes a whole
            // 512-byte row (BN 256), two 256-byte rows (BN 128), or the end of one row and the start
            // of the next.
            const int st = tid - 32;
            const int sw = st / 32;
            u32 parity = 0;
#pragma unroll 1
            for (Sm90Work w(tiles, sk_tiles, sk_split, KT, CLUSTER, sk_bounds); w.next();) {
                // No C tile: a phantom, or a part that goes to sk_partial.
                if (w.s >= tiles || w.part == kHeadTile || w.part == kTailPark) continue;
                int tm, tn;
                raster.tile(w.s, tm, tn);
                const int rows = min(BM, M - tm * BM);
                const int cols = min(BN, N - tn * BN);
                if (kTableStore && !DIRECT_C) {
                    // The tile's row offsets, fetched while the consumers still compute it.
                    for (int r = st; r < rows; r += S::STORE_THREADS)
                        st_shared_s64(smem_ro + r * 8, row_offset[i64(tm * BM + r) * tiles_n + tn]);
                }
                i64 place_base = 0, place_sub_stride = 0;
                int place_shift = 0;
                if (kPlaced && !DIRECT_C) {  // the tile's place, in registers (the store warps have them to spare)
                    const i64* place = row_offset + i64(tm * tiles_n + tn) * 4;
                    place_base = place[0];
                    place_sub_stride = place[1];
                    place_shift = int(place[2]);
                }
                hang_where(1, int(parity), w.s, w.part, -1);
                mbar_wait(bar_c_full, parity);
                if (kTableStore && !DIRECT_C) bar_sync(1, S::STORE_THREADS);  // row offsets visible to all store warps
#pragma unroll 2
                for (int g = sw; !DIRECT_C && g * 32 < rows * S::C_CHUNKS; g += 3) {
                    const int r = (g * 32 + lane) / S::C_CHUNKS;
                    const int ch = g * 32 + lane - r * S::C_CHUNKS;
                    if (r < rows && ch * 8 < cols) {
                        u32 v[4];
                        ld_shared_v4(S::c_chunk(smem_c, r, ch), v);
                        bits16* dst;
                        if (kTableStore) {
                            dst = comm_buf + ld_shared_s64(smem_ro + r * 8) + ch * 8;
                        } else if (kPlaced) {
                            dst = comm_buf + placed_row(place_base, place_sub_stride, place_shift, r, cols) + ch * 8;
                        } else {
                            dst = C + i64(tm * BM + r) * ldc + tn * BN + ch * 8;
                        }
                        store_c_chunk(dst, v, cols - ch * 8);
                    }
                }
                // This thread's reads of smem C are done (their values are in the stores above);
                // DIRECT_C: it has seen the consumers' hand-over of the tile, stored by themselves.
                mbar_arrive(bar_c_empty);
                // Every store warp's global stores (and reads of smem_ro) precede the publication
                // below and the next tile's row-offset fetch.
                if (!DIRECT_C) bar_sync(1, S::STORE_THREADS);
                if ((kSignal || EPILOGUE == 2) && st == 0) {
                    const int tile_id = tm * tiles_n + tn;
                    if (kSignal) {
                        // bar.sync orders the other store threads' stores before this thread at CTA
                        // scope (DIRECT_C: the consumers' stores precede their release arrivals on
                        // c_full, which this thread acquired); red.release.gpu is cumulative, so a
                        // waiter that acquires the counter sees the whole tile (the same protocol as
                        // gemm_mma.cuh).
                        red_release_gpu_add(group_counter + tile_group[tile_id], 1u);
                    } else {
                        probe[tile_id * 4 + 1] = globaltimer_ns();
                        probe[tile_id * 4 + 2] = smid();
                        probe[tile_id * 4 + 3] = blockIdx.x;
                    }
                }
                parity ^= 1u;
            }
            hang_where(1, 0, -1, -1, -9);  // done
        }
    } else {
        // ----------------------------------------------------------------- consumer warpgroups
        regs_alloc<S::CONSUMER_REGS>();
        // Cooperative: warpgroup c computes rows 64 c .. 64 c + 63 of every unit (H = 1 half, half c).
        // Ping-pong: warpgroup c computes whole tiles, the units u with u % 2 == c (H = 2 halves), its
        // main loop after the other's (order barriers), so one's epilogue runs under the other's
        // MMAs; it keeps one k-block of MMAs in flight.
        // Shuffled so ptxas sees it warp-uniform: the ping-pong k-loop then builds its wgmma
        // descriptors on the uniform datapath (no R2UR). With a stream-K tail compiled in, the
        // uniform registers do not hold both and ptxas spills, so there it stays as it is.
        const int c = STREAM_K ? wg - 1 : __shfl_sync(0xffffffffu, wg - 1, 0);
        constexpr int H = PINGPONG ? 2 : 1;
        // One k-block of MMAs in flight, so the tensor cores do not drain at every k-block while the
        // warpgroup frees its stage and waits for the next: its stage is held a k-block longer, which
        // a ring of 4+ stages spares (ping-pong always does it: the other warpgroup's MMAs wait).
        // 3-stage rings (BN 224-256) keep the producer's whole lookahead and wait per k-block.
        constexpr bool kMmaInFlight = PINGPONG || STAGES >= 4;
        const u32 bar_id = PINGPONG ? 2 + c : 2;       // this warpgroup's (or both consumers') named barrier
        constexpr u32 bar_count = PINGPONG ? 128 : 256;
        const bool lead = PINGPONG ? tid == 0 : (c == 0 && tid == 0);  // flags, stamps
        // A warpgroup that walks stages without reading them (a phantom unit, a cooperative warpgroup
        // without rows) frees each with one arrival, so its warps meet first: nothing else holds them
        // together there (wgmma does in the main loop), and a warp still waiting on the stage's full
        // barrier when the producer has refilled it twice would wait on a later phase, for ever.
        // The walk is written out in both main-loop paths below: as one lambda it moved the stream-K
        // kernels' wgmma descriptors out of uniform registers (R2UR in their k-loops).
        const u32 walk_bar = PINGPONG ? 2 + c : 3 + c;
        const int warp = tid / 32;
        const int lane = tid % 32;
        const u32 desc_lo = desc_sw128_lo(base);  // stage 0's A; B is A_BYTES on
        // This warpgroup's rows of A in a stage (ping-pong: the first half; the second is 64 rows on),
        // shuffled so ptxas sees it warp-uniform where c is not (a stream-K tail compiled in).
        const u32 a_rows = PINGPONG ? 0 : __shfl_sync(0xffffffffu, c, 0) * (64 * BK * 2);
        float acc[H][S::ACC];
#pragma unroll
        for (int h = 0; h < H; ++h)
#pragma unroll
            for (int i = 0; i < S::ACC; ++i) acc[h][i] = 0.f;
        int stage = 0;
        u32 phase = 0;
        u32 c_parity = 0;    // C tiles staged so far (both warpgroups' in ping-pong), mod 2
        u32 order_par = 0;   // ping-pong: waits on this warpgroup's order barrier so far, mod 2
        u32 epi_par = 0;     // ping-pong: waits on this warpgroup's epi barrier so far, mod 2
        int unit = -1;
#pragma unroll 1
        for (Sm90Work w(tiles, sk_tiles, sk_split, KT, CLUSTER, sk_bounds); w.next();) {
            ++unit;
            const int k0 = w.k0, part = w.part;
            const bool stages_c = w.s < tiles && part != kHeadTile && part != kTailPark;  // a C tile
            if (PINGPONG && (unit & 1) != c) {  // the other warpgroup's unit: step over its k-blocks
                const int pos = stage + (w.k1 - k0);
                phase ^= u32(pos / STAGES) & 1u;
                stage = pos % STAGES;
                c_parity ^= u32(stages_c);
                continue;
            }
            // Ping-pong: not before the other warpgroup has waited for every stage of the unit before
            // this one (then no stage of this unit can be a whole ring pass ahead of its barrier).
            if (PINGPONG && unit > 0) {
                if (FO_SM90_ORDER_LAG_NS && warp != 0) __nanosleep(FO_SM90_ORDER_LAG_NS);
                mbar_wait(bar_order + 8 * c, order_par);
                order_par ^= 1u;
            }
            const bool phantom = w.s >= tiles;
            int tm = 0, tn = 0;
            if (!phantom) raster.tile(w.s, tm, tn);
            // Cooperative: a warpgroup whose 64 rows all lie past M (the last tile row, where M leaves
            // at most 64 rows in it) walks the unit's stages without MMAs, as a phantom does, so the
            // tile costs less (the host may weigh it so: fo_lib.gemm.stream_k.stream_k_weighted). Its
            // accumulators are not stored (rows past M).
            const bool idle = phantom || (FO_SM90_IDLE_WG && !PINGPONG && tm * BM + 64 * __shfl_sync(0xffffffffu, c, 0) >= M);
            // DIRECT_C with a row table or tile places: where row r of the tile goes (null past M),
            // fetched before the main loop, so the loads' latency hides under it (fetched at each
            // store, a chain of dependent loads held up the last tile's stores, the kernel's tail).
            // Cooperative: this lane's four rows (16 warp + lane / 8 + 4 i of its half); ping-pong
            // (a whole tile's accumulators leave registers for one pointer): lane l holds row
            // 64 (l / 16) + 16 warp + l % 16, the warp's 16 rows of both halves, and each store takes
            // its row's from the lane that holds it. C's rows are computed at each store (four 64-bit
            // pointers made the 256-wide tile spill).
            const auto table_row = [&](int r) -> bits16* {
                if (r >= M - tm * BM) return nullptr;
                if (kTableStore) return comm_buf + row_offset[i64(tm * BM + r) * tiles_n + tn];
                const i64* place = row_offset + i64(tm * tiles_n + tn) * 4;
                return comm_buf + placed_row(place[0], place[1], int(place[2]), r, min(BN, N - tn * BN));
            };
            bits16* row_dst[4] = {nullptr, nullptr, nullptr, nullptr};
            if (DIRECT_C && !PINGPONG && (kTableStore || kPlaced) && stages_c) {
#pragma unroll
                for (int i = 0; i < 4; ++i) row_dst[i] = table_row(c * 64 + warp * 16 + (lane >> 3) + 4 * i);
            }
            bits16* lane_row = nullptr;
            if (DIRECT_C && PINGPONG && (kTableStore || kPlaced) && stages_c)
                lane_row = table_row((lane >> 4) * 64 + warp * 16 + (lane & 15));
            if (EPILOGUE == 2 && stages_c && lead) probe[(tm * tiles_n + tn) * 4 + 0] = globaltimer_ns();
            if (kMmaInFlight) {
                // One k-block of MMAs in flight: k-block kb's stage is freed once kb + 1's are issued
                // and wgmma.wait_group 1 says kb's are done. No branch that is not uniform in here.
                const u32 one = tid == 0;
                const u32 hand = FO_SM90_HANDOVER_ALL ? 1u : one;  // who hands the turn over
                const int nk = idle ? 0 : w.k1 - k0;  // a phantom or idle warpgroup keeps step below instead
                int prev = stage;
                // Ping-pong: the other warpgroup's turn once this unit's last MMAs are issued (a phantom's
                // after its walk of the stages below; FO_SM90_ORDER_AT_ISSUE=0: once they are done).
                const bool order_at_issue = FO_SM90_ORDER_AT_ISSUE && (CLUSTER == 1 || !phantom);
#pragma unroll 1
                for (int i = 0; i < nk; ++i) {
                    hang_where(2 + c, unit, w.s, part, k0 + i);
                    mbar_wait_in_asm(bar_full + 8 * stage, phase);
                    const u32 at = stage * S::STAGE_BYTES;
#pragma unroll
                    for (int h = 0; h < H; ++h) fence_acc(acc[h]);
                    wgmma_fence();
#pragma unroll
                    for (int h = 0; h < H; ++h) {
#pragma unroll
                        for (int kk = 0; kk < BK / 16; ++kk)
                            Wgmma<BN>::mma(acc[h], desc_sw128_at(desc_lo, at + a_rows + h * (64 * BK * 2) + kk * 32),
                                           desc_sw128_at(desc_lo, at + S::A_BYTES + kk * 32), (i | kk) != 0, T{});
                    }
                    wgmma_commit();
                    wgmma_wait<1>();
#pragma unroll
                    for (int h = 0; h < H; ++h) fence_acc(acc[h]);
                    mbar_arrive_pred<CLUSTER>(bar_empty + 8 * prev, rank ^ 1u, one & u32(i > 0));
                    prev = stage;
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1u;
                    }
                }
                // Every stage of this unit has been waited for, so the other warpgroup may start its
                // next unit now: its MMAs queue behind this unit's last ones, and the tensor cores do
                // not drain between the two warpgroups' units.
                if (PINGPONG && order_at_issue) mbar_arrive_pred<1>(bar_order + 8 * (c ^ 1), 0u, hand);
                wgmma_wait<0>();
#pragma unroll
                for (int h = 0; h < H; ++h) fence_acc(acc[h]);
                mbar_arrive_pred<CLUSTER>(bar_empty + 8 * prev, rank ^ 1u, one & u32(nk > 0));
#pragma unroll 1
                for (int kb = idle ? k0 : w.k1; kb < w.k1; ++kb) {  // no MMAs here: keep step (see walk_bar)
                    hang_where(2 + c, unit, w.s, part, 1000 + kb);
                    if (FO_SM90_WALK_LAG_NS && warp == 3) __nanosleep(FO_SM90_WALK_LAG_NS);
                    mbar_wait(bar_full + 8 * stage, phase);
                    if (FO_SM90_WALK_MEET) bar_sync(walk_bar, 128);
                    mbar_arrive_pred<CLUSTER>(bar_empty + 8 * stage, rank ^ 1u, one);
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1u;
                    }
                }
                // Every stage of this unit has been waited for: the other warpgroup may start its next.
                if (PINGPONG && !order_at_issue) mbar_arrive_pred<1>(bar_order + 8 * (c ^ 1), 0u, hand);
            } else {
#pragma unroll 1
                for (int kb = idle ? k0 : w.k1; kb < w.k1; ++kb) {  // no MMAs here: keep step (see walk_bar)
                    hang_where(2 + c, unit, w.s, part, 1000 + kb);
                    if (FO_SM90_WALK_LAG_NS && warp == 3) __nanosleep(FO_SM90_WALK_LAG_NS);
                    mbar_wait(bar_full + 8 * stage, phase);
                    if (FO_SM90_WALK_MEET) bar_sync(walk_bar, 128);
                    mbar_arrive_pred<CLUSTER>(bar_empty + 8 * stage, rank ^ 1u, u32(tid == 0));
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1u;
                    }
                }
#pragma unroll 1
                for (int kb = k0; kb < (idle ? k0 : w.k1); ++kb) {
                    hang_where(2 + c, unit, w.s, part, kb);
                    mbar_wait(bar_full + 8 * stage, phase);
                    const u32 at = stage * S::STAGE_BYTES;
                    fence_acc(acc[0]);
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < BK / 16; ++kk) {
                        // scale_d = 0 on the part's first k16 step: D = A B^T, no zeroing pass needed.
                        Wgmma<BN>::mma(acc[0], desc_sw128_at(desc_lo, at + a_rows + kk * 32),
                                       desc_sw128_at(desc_lo, at + S::A_BYTES + kk * 32),
                                       ((kb - k0) | kk) != 0, T{});
                    }
                    wgmma_commit();
                    wgmma_wait<0>();
                    fence_acc(acc[0]);
                    // wgmma.wait_group 0 means this warpgroup's MMAs (and their shared-memory reads of
                    // the stage) are complete: one arrival per warpgroup frees the stage, in this CTA and
                    // (cluster 2) in the other, whose producer multicasts into this stage too.
                    if (tid == 0) {
                        mbar_arrive(bar_empty + 8 * stage);
                        if (CLUSTER > 1) mbar_arrive_remote(bar_empty + 8 * stage, rank ^ 1u);
                    }
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1u;
                    }
                }
            }
            // Ping-pong: C tiles are staged in unit order. c_empty's parity tells "the previous tile
            // is stored" from "the one before is", not more: a warpgroup may stage its tile only after
            // the other has staged (or passed) the unit before (epi[c]), so it is never two tiles ahead.
            if (PINGPONG && unit > 0) {
                mbar_wait(bar_epi + 8 * c, epi_par);
                epi_par ^= 1u;
            }
            const auto pass_epilogue = [&]() {
                if (PINGPONG) mbar_arrive_pred<1>(bar_epi + 8 * (c ^ 1), 0u, u32(FO_SM90_HANDOVER_ALL || tid == 0));
            };
            if (phantom) {
                pass_epilogue();
                continue;
            }
            // Stream-K: a slot holds a part's accumulators as [half][i / 4][consumer thread][4] floats:
            // each thread's float4s, coalesced across the warpgroup; every thread reads back only
            // what it (or its twin in another CTA) wrote.
            const int dp = w.dp;
            // Half `half` of slot i (i: 2 b a head or split part, 2 b + 1 a parked tail).
            const auto sk_slot = [&](i64 i, int half) {
                return reinterpret_cast<float4*>(sk_partial + i * (BM * BN)) + half * (S::ACC / 4) * 128;
            };
            const auto add_slot = [&](i64 i, bool assign) {
#pragma unroll
                for (int h = 0; h < H; ++h) {
                    const float4* src = sk_slot(i, PINGPONG ? h : c);
#pragma unroll
                    for (int q = 0; q < S::ACC / 4; ++q) {
                        const float4 v = __ldcg(src + q * 128 + tid);  // .cg: at L2, where the other SM wrote
                        acc[h][4 * q] = assign ? v.x : acc[h][4 * q] + v.x;
                        acc[h][4 * q + 1] = assign ? v.y : acc[h][4 * q + 1] + v.y;
                        acc[h][4 * q + 2] = assign ? v.z : acc[h][4 * q + 2] + v.z;
                        acc[h][4 * q + 3] = assign ? v.w : acc[h][4 * q + 3] + v.w;
                    }
                }
            };
            if (part == kHeadTile || part == kTailPark) {
                const i64 i = 2 * i64(blockIdx.x) + (part == kTailPark);
#pragma unroll
                for (int h = 0; h < H; ++h) {
                    float4* slot = sk_slot(i, PINGPONG ? h : c);
#pragma unroll
                    for (int q = 0; q < S::ACC / 4; ++q)
                        __stcg(slot + q * 128 + tid,
                               make_float4(acc[h][4 * q], acc[h][4 * q + 1], acc[h][4 * q + 2], acc[h][4 * q + 3]));
                }
                if (part == kHeadTile) {
                    // bar.sync orders every consumer's stores before thread 0's release (cumulative,
                    // gpu scope): the finisher's acquire then sees the whole slot (the signal's protocol).
                    hang_where(2 + c, unit, w.s, part, -4);
                    bar_sync(bar_id, bar_count);
                    red_release_gpu_add_if(lead, sk_flag + (w.s - dp), 1u);
                }
                pass_epilogue();
                continue;
            }
            if (part == kSplitLast) {
                // The tile's other parts are the first units of CTAs b - sk, b - 2 sk, ..., which
                // wait on nothing; added from the latest k range down (deterministic).
                // Every warp polls, by a vote: a loop no lane leaves alone keeps the warps converged,
                // and with them the main loop's descriptors in uniform registers (a lone thread's
                // spin made ptxas move them through vector registers in every k-block).
                hang_where(2 + c, unit, w.s, part, -3);
                const u64 t0 = FO_SM90_HANG_TRAP ? globaltimer_ns() : 0;
                bool told = false;
                while (!__all_sync(0xffffffffu, ld_acquire_gpu(sk_flag + (w.s - dp)) == u32(w.split - 1))) {
                    if (FO_SM90_HANG_TRAP) hang_trap(t0, told, "split flag (tile, value)", w.s, ld_acquire_gpu(sk_flag + (w.s - dp)));
                }
                bar_sync(bar_id, bar_count);
                if (lead) sk_flag[w.s - dp] = 0u;  // ready for the next launch (every warp has seen it)
                for (int i = 1; i < w.split; ++i) add_slot(2 * i64(int(blockIdx.x) - i * w.sk), false);
            }
            if (part == kTailTile || part == kFinishParked) {
                if (part == kFinishParked) add_slot(2 * i64(blockIdx.x) + 1, true);  // the parked tail back
                // The head of this tile is the first unit of CTA b - 1's run.
                hang_where(2 + c, unit, w.s, part, -3);
                const u64 t0 = FO_SM90_HANG_TRAP ? globaltimer_ns() : 0;
                bool told = false;
                while (!__all_sync(0xffffffffu, ld_acquire_gpu(sk_flag + (w.s - dp)) != 0u)) {  // (as above)
                    if (FO_SM90_HANG_TRAP) hang_trap(t0, told, "head flag (tile, part)", w.s, part);
                }
                bar_sync(bar_id, bar_count);
                if (lead) sk_flag[w.s - dp] = 0u;  // ready for the next launch (every warp has seen it)
                add_slot(2 * i64(blockIdx.x - 1), false);
            }
            // Epilogue: accumulators -> smem C (16-bit), 16-byte chunks placed by Sm90Shape::c_chunk
            // (DIRECT_C: through the warp's own buffers to global memory).
            // Fragment of wgmma m64nNk16: acc[h][4 j + 2 g + e] is row 16 warp + lane / 4 + 8 g,
            // column 8 j + 2 (lane % 4) + e of the half's 64 x BN block.
            hang_where(2 + c, unit, w.s, part, -2);
            mbar_wait(bar_c_empty, c_parity ^ 1u);  // the store warps are done with the previous tile
            if (DIRECT_C) {
                // Each warp its own 16 rows (of each half it computes), 64 columns at a time: stmatrix
                // into one of its two buffers, then every lane stores 4 chunks (a warp store: 4 rows x
                // 128 bytes). The two warpgroups' buffers are apart.
                const int cols = min(BN, N - tn * BN);
                const u32 wbuf = smem_c + (c * 4 + warp) * (2 * S::WARP_C_BYTES);
                const int lr = ((lane >> 3) & 1) * 8 + (lane & 7);  // the buffer row this lane addresses
#pragma unroll
                for (int h = 0; h < H; ++h) {
                    const int half = PINGPONG ? h : c;
#pragma unroll
                    for (int cb = 0; cb < (BN + 63) / 64; ++cb) {
                        const u32 buf = wbuf + (cb & 1) * S::WARP_C_BYTES;
                        // Every lane's reads of this buffer are done. (The syncs of the block between
                        // already order them; this one keeps that from resting on the block count's
                        // parity across tiles and halves.)
                        __syncwarp();
                        const int j_end = min(8 * cb + 8, BN / 8);
#pragma unroll
                        for (int j = 8 * cb; j + 1 < j_end; j += 2)
                            stmatrix_acc<T>(S::warp_c_chunk(buf, lr, j - 8 * cb + (lane >> 4)), acc[h], j);
                        if ((BN / 8) % 2 && j_end == BN / 8)  // an odd count of 8-column blocks: the last alone
                            stmatrix_acc_last<T>(S::warp_c_chunk(buf, lr, BN / 8 - 1 - 8 * cb), acc[h], BN / 8 - 1);
                        __syncwarp();
                        const int ch = 8 * cb + (lane & 7);
                        // (ping-pong: not unrolled, a whole tile's accumulators are live here)
#pragma unroll(PINGPONG ? 1 : 4)
                        for (int i = 0; i < 4; ++i) {
                            const int r = half * 64 + warp * 16 + (lane >> 3) + 4 * i;
                            bits16* trow = nullptr;  // (ping-pong: from the lane that holds row r; every lane shuffles)
                            if (kTableStore || kPlaced)
                                trow = !PINGPONG ? row_dst[i] : reinterpret_cast<bits16*>(__shfl_sync(
                                    0xffffffffu, reinterpret_cast<unsigned long long>(lane_row), h * 16 + (lane >> 3) + 4 * i));
                            const bool row_in = (kTableStore || kPlaced) ? trow != nullptr : r < M - tm * BM;
                            if (row_in && ch * 8 < cols) {  // (ch * 8 < cols <= BN: a chunk of the tile)
                                u32 v[4];
                                ld_shared_v4(S::warp_c_chunk(buf, (lane >> 3) + 4 * i, lane & 7), v);
                                bits16* row = (kTableStore || kPlaced) ? trow : C + i64(tm * BM + r) * ldc + tn * BN;
                                store_c_chunk(row + ch * 8, v, cols - ch * 8);
                            }
                        }
                    }
                }
            } else {
#pragma unroll
                for (int h = 0; h < H; ++h) {
                    // stmatrix x4 stores the 8 x 8 blocks (j, g = 0), (j, 1), (j + 1, 0), (j + 1, 1): lane l
                    // addresses row l % 8 of block l / 8, chunk j + l / 16.
                    const int st_row = (PINGPONG ? h : c) * 64 + warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
                    for (int j = 0; j + 1 < BN / 8; j += 2) {
                        stmatrix_acc<T>(S::c_chunk(smem_c, st_row, j + (lane >> 4)), acc[h], j);
                    }
                    if (BN % 16) stmatrix_acc_last<T>(S::c_chunk(smem_c, st_row, BN / 8 - 1), acc[h], BN / 8 - 1);
                }
            }
            // Release (CTA scope): the store warps read C (DIRECT_C: signal) after this.
            mbar_arrive(bar_c_full);
            c_parity ^= 1u;
            pass_epilogue();
        }
        hang_where(2 + c, unit, -1, -1, -9);  // done
    }
    // Cluster 2: the other CTA's last arrivals on this CTA's barriers land before either exits.
    if (CLUSTER > 1) cluster_sync();
}

}  // namespace fo
