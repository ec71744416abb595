// Shared device helpers for every fo_lib kernel.
//
// NOTES: no CUDA toolkit header is included anywhere under fo_lib/cuda. NVRTC then needs nothing
// but itself (CI compiles every kernel on a CPU-only machine with only the NVRTC wheel), and the
// same sources build under CUDA 12 and 13. 16-bit floats are carried as raw bits (`fo::bits16`) and
// converted with PTX.
#pragma once

namespace fo {

typedef unsigned short bits16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

// Element type tags, chosen at compile time by the generated source (FO_DTYPE_BF16 / FO_DTYPE_F16).
struct bf16_tag {};
struct f16_tag {};

__device__ __forceinline__ float bf16_to_float(bits16 x) { return __uint_as_float(u32(x) << 16); }

__device__ __forceinline__ float f16_to_float(bits16 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
}

// Pack two floats into one register of two 16-bit values (lo in the low half), round to nearest even.
__device__ __forceinline__ u32 pack2(bf16_tag, float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ u32 pack2(f16_tag, float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ bits16 from_float(bf16_tag, float x) { return bits16(pack2(bf16_tag{}, x, 0.f)); }
__device__ __forceinline__ bits16 from_float(f16_tag, float x) { return bits16(pack2(f16_tag{}, x, 0.f)); }
__device__ __forceinline__ float to_float(bf16_tag, bits16 x) { return bf16_to_float(x); }
__device__ __forceinline__ float to_float(f16_tag, bits16 x) { return f16_to_float(x); }

__device__ __forceinline__ u64 globaltimer_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ u32 smid() {
    u32 id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

// GPU-scope acquire load / release add: the two halves of the counting-table protocol.
__device__ __forceinline__ u32 ld_acquire_gpu(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void red_release_gpu_add(u32* p, u32 v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
// The same, predicated inside the asm (no branch around it: straight-line code for the caller).
__device__ __forceinline__ void red_release_gpu_add_if(bool pred, u32* p, u32 v) {
    asm volatile("{ .reg .pred q; setp.ne.b32 q, %2, 0; @q red.release.gpu.global.add.u32 [%0], %1; }"
                 :: "l"(p), "r"(v), "r"(int(pred)) : "memory");
}

// Epoch targets wrap around 2^32 calls; compare in modular arithmetic.
__device__ __forceinline__ bool counter_reached(u32 value, u32 target) { return int(value - target) >= 0; }

}  // namespace fo
