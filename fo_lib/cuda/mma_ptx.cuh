// PTX wrappers of the portable GEMM (sm_80 .. sm_90): cp.async, ldmatrix, mma.sync m16n8k16, the
// shared/global accessors of the epilogue, and the operand tiles' swizzle. No kernel logic:
// gemm_mma.cuh composes the roles that use these (mma_producer.cuh, mma_epilogue.cuh).
//
// NOTES: no toolkit headers (see common.cuh); every shared-memory access is PTX on 32-bit shared
// addresses, every 16-bit value is raw bits. These accessors carry no "memory" clobber: the kernel
// orders its accesses with __syncthreads (its code generation is tuned with them); the Hopper
// kernel's, handed between warps by mbarriers, have one (sm90_ptx.cuh).
#pragma once

#include "common.cuh"

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

}  // namespace fo
