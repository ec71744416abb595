// PTX wrappers of the Hopper GEMM (sm_90a): mbarriers, TMA loads (multicast into a cluster),
// cluster barriers, wgmma and its shared-memory descriptors, setmaxnreg, named barriers, and the
// shared/global accessors and stmatrix of the epilogue. No kernel logic: gemm_sm90.cuh composes the
// roles that use these (sm90_producer.cuh, sm90_mainloop.cuh, sm90_epilogue.cuh, ...).
#pragma once

#include "common.cuh"

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
// The shared/global accessors below are not the portable kernel's (mma_ptx.cuh): here the C tile is
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

}  // namespace fo
