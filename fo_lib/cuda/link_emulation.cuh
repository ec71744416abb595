// The device-side steps of the loopback (emulated) link, fo_lib.comm.loopback: the SM-copy mode's
// byte mover and the scale that finishes its emulated reductions.
#pragma once
#include "common.cuh"

namespace fo {

// Grid-stride 16-byte copy. With UVA a pinned host buffer is addressable from the device, so in
// SM-copy mode the bytes cross the host link inside this kernel, on the SMs it runs on.
__device__ __forceinline__ void copy16(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n) {
  const u64 stride = u64(gridDim.x) * blockDim.x;
  for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}

template <typename Tag>
__device__ __forceinline__ u32 scale2(Tag, u32 x, float s) {
  return pack2(Tag{}, to_float(Tag{}, bits16(x & 0xFFFFu)) * s, to_float(Tag{}, bits16(x >> 16)) * s);
}

template <typename Tag>
__device__ __forceinline__ uint4 scale8(Tag, uint4 v, float s) {
  return make_uint4(scale2(Tag{}, v.x, s), scale2(Tag{}, v.y, s), scale2(Tag{}, v.z, s), scale2(Tag{}, v.w, s));
}

// dst[i] = src[i] * scale for n 16-bit values; dst may be src (in place); both 16-byte aligned.
// NOTES: kUnroll 16-byte loads are in flight per thread before the first store. Beside a GEMM this
// kernel only gets the SMs the GEMM leaves free, and its speed there is the bytes each of them keeps
// in flight: torch's mul_ (one vector per thread per step) visibly stretched the first collective
// beside the GEMM.
template <typename Tag, int kUnroll>
__device__ __forceinline__ void scale16(const bits16* src, bits16* dst, u64 n, float scale) {
  const u64 vecs = n / 8;
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(dst);
  const u64 stride = u64(gridDim.x) * blockDim.x;
  const u64 first = u64(blockIdx.x) * blockDim.x + threadIdx.x;
  u64 i = first;
  for (; i + (kUnroll - 1) * stride < vecs; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = s[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) d[i + u * stride] = scale8(Tag{}, v[u], scale);
  }
  for (; i < vecs; i += stride) d[i] = scale8(Tag{}, s[i], scale);
  const u64 tail = vecs * 8 + first;  // the last n % 8 elements, one per thread
  if (tail < n) dst[tail] = from_float(Tag{}, to_float(Tag{}, src[tail]) * scale);
}

}  // namespace fo
