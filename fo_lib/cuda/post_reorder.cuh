// Post-communication reorder: gather the communication buffer back into row-major order, fused
// with the element-wise epilogue (bias, activation, residual add, residual store, RMSNorm).
//
// Table format (nothing else about tiles is assumed, so the ReduceScatter -> AllGather restore uses
// the same kernel with another table): src_offset is int64 [R, tiles_n] row-major, and output
// element (r, j) comes from buf[src_offset[r * tiles_n + j / BN] + j % BN]; the BN (or fewer, at
// the row's end) elements of one table entry are contiguous in buf.
//
// SOURCES > 1 (an AllReduce whose collective was an AllGather): every table entry has SOURCES
// copies in buf, copy s at src_offset[...] + s * peer_stride[...] (same [R, tiles_n] format), and
// v is their sum in fp32, before anything else.
//
// Per element, in this order (fp32 throughout, every 16-bit result rounded once):
//   v = buf[...] (summed over the copies); v += bias[j]; v = act(v); v += residual[r, j]; residual_out[r, j] = v;
//   out[r, j] = NORM ? v * rsqrt(mean_j(v^2) + eps) * weight[j] : v
// (residual_out may alias residual: each element is read and written by the same thread.)
//
// Launch shape: block (G, RPC), grid (ceil(R / RPC), YSPLIT). G (threads per row) is a multiple of
// 32, so a warp never straddles two rows; RPC rows share a CTA when rows are short. Each thread owns
// chunks of 8 elements:
//   VEC    (BN % 8 == 0, N % 8 == 0, ldo % 8 == 0, every pointer 16-byte aligned; the host checks):
//          chunk c = 8 consecutive elements j = 8c .. 8c+7, one 16-byte load/store each. A chunk
//          never straddles a table entry (BN % 8 == 0); if its source offset is not a multiple of 8
//          the chunk falls back to eight 2-byte loads (correct for any table, fast for aligned ones).
//   scalar (anything else): stripe s covers elements [8 G s, 8 G (s + 1)); thread tx owns
//          j = 8 G s + e G + tx, e = 0..7, so each 2-byte access of a warp is coalesced.
// Thread tx of column block y owns chunks (stripes) c = (k * YSPLIT + y) * G + tx (s = k * YSPLIT
// + y), k = 0, 1, ..., processed ITEMS at a time (all loads of a group issued before any use).
// NORM keeps the whole row in registers (ITEMS chunks, i.e. 8 * ITEMS fp32 values per thread): the
// host guarantees YSPLIT == 1 and G * ITEMS * 8 >= N; the sum of squares is reduced with warp
// shuffles and, when G > 32, one shared-memory exchange; no second read of global memory.
#pragma once
#include "common.cuh"

namespace fo {

enum : int { ACT_NONE = 0, ACT_RELU = 1, ACT_SILU = 2, ACT_GELU_TANH = 3, ACT_GELU_ERF = 4 };

template <int ACT>
__device__ __forceinline__ float activate(float x) {
    if constexpr (ACT == ACT_RELU) {
        return fmaxf(x, 0.f);
    } else if constexpr (ACT == ACT_SILU) {
        return x / (1.f + __expf(-x));
    } else if constexpr (ACT == ACT_GELU_TANH) {
        // 0.5 x (1 + tanh(u)) == x * sigmoid(2u): no tanh.approx (fast-math) cancellation for x < 0.
        const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        return x / (1.f + __expf(-2.f * u));
    } else if constexpr (ACT == ACT_GELU_ERF) {
        // 0.5 x (1 + erf(x / sqrt 2)) == 0.5 x erfc(-x / sqrt 2): no cancellation in the negative
        // tail. erfc by the Chebyshev fit of Numerical Recipes (erfcc, relative error < 1.2e-7): far
        // fewer registers than the libdevice erfcf, which made the unrolled kernel spill.
        const float a = -0.7071067811865476f * x;
        const float z = fabsf(a);
        const float t = 1.f / (1.f + 0.5f * z);
        float p = 0.17087277f;
        p = fmaf(p, t, -0.82215223f);
        p = fmaf(p, t, 1.48851587f);
        p = fmaf(p, t, -1.13520398f);
        p = fmaf(p, t, 0.27886807f);
        p = fmaf(p, t, -0.18628806f);
        p = fmaf(p, t, 0.09678418f);
        p = fmaf(p, t, 0.37409196f);
        p = fmaf(p, t, 1.00002368f);
        p = fmaf(p, t, -1.26551223f);
        const float c = t * __expf(p - z * z);  // erfc(|a|)
        return 0.5f * x * (a >= 0.f ? c : 2.f - c);
    } else {
        return x;
    }
}

// --- global memory access (PTX: no toolkit headers) ------------------------------------------
struct alignas(16) v4u32 { u32 a, b, c, d; };

// Read-only data (the buffer, the table, bias, weight): non-coherent path, freely schedulable.
__device__ __forceinline__ v4u32 ld_nc_v4(const bits16* p) {
    v4u32 v;
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.a), "=r"(v.b), "=r"(v.c), "=r"(v.d) : "l"(p));
    return v;
}
__device__ __forceinline__ bits16 ld_nc_u16(const bits16* p) {
    bits16 v;
    asm("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ i64 ld_nc_s64(const i64* p) {
    i64 v;
    asm("ld.global.nc.s64 %0, [%1];" : "=l"(v) : "l"(p));
    return v;
}
// The residual may be overwritten by residual_out in this kernel (same element, same thread, after
// the read; the data dependence orders them): coherent loads.
__device__ __forceinline__ v4u32 ld_v4(const bits16* p) {
    v4u32 v;
    asm("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.a), "=r"(v.b), "=r"(v.c), "=r"(v.d) : "l"(p));
    return v;
}
__device__ __forceinline__ bits16 ld_u16(const bits16* p) {
    bits16 v;
    asm("ld.global.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ void st_v4(bits16* p, v4u32 v) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.a), "r"(v.b), "r"(v.c), "r"(v.d));
}
__device__ __forceinline__ void st_u16(bits16* p, bits16 v) {
    asm volatile("st.global.u16 [%0], %1;" ::"l"(p), "h"(v));
}

template <class T>
__device__ __forceinline__ void unpack8(T, v4u32 v, float (&f)[8]) {
    const u32 w[4] = {v.a, v.b, v.c, v.d};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = to_float(T{}, bits16(w[i] & 0xffffu));
        f[2 * i + 1] = to_float(T{}, bits16(w[i] >> 16));
    }
}
__device__ __forceinline__ void unpack8(bf16_tag, v4u32 v, float (&f)[8]) {
    const u32 w[4] = {v.a, v.b, v.c, v.d};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
template <class T>
__device__ __forceinline__ v4u32 pack8(T, const float (&f)[8]) {
    return {pack2(T{}, f[0], f[1]), pack2(T{}, f[2], f[3]), pack2(T{}, f[4], f[5]), pack2(T{}, f[6], f[7])};
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Sum over the G threads (G / 32 whole warps) of this thread's row; every thread gets the total.
// Called by every thread of the block (also those of rows past R) exactly once.
__device__ __forceinline__ float row_sum(float x) {
    __shared__ float partial[32];
    x = warp_sum(x);
    const int warps_per_row = int(blockDim.x) >> 5;
    if (warps_per_row == 1) return x;  // uniform over the block
    const int warp = int(threadIdx.y * blockDim.x + threadIdx.x) >> 5;
    if ((threadIdx.x & 31) == 0) partial[warp] = x;
    __syncthreads();
    const int base = int(threadIdx.y) * warps_per_row;
    float total = 0.f;
    for (int w = 0; w < warps_per_row; ++w) total += partial[base + w];
    return total;
}

// 8 consecutive elements of buf from offset off: one 16-byte load when off is a multiple of 8, else
// eight 2-byte loads (same values; any table is correct, aligned ones are fast).
__device__ __forceinline__ v4u32 ld_nc_chunk(const bits16* p, i64 off) {
    if ((off & 7) == 0) return ld_nc_v4(p + off);
    bits16 h[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) h[e] = ld_nc_u16(p + off + e);
    return {u32(h[0]) | (u32(h[1]) << 16), u32(h[2]) | (u32(h[3]) << 16), u32(h[4]) | (u32(h[5]) << 16),
            u32(h[6]) | (u32(h[7]) << 16)};
}

template <class T, int ACT, bool BIAS, bool RES, bool RES_OUT, bool NORM, bool VEC, int ITEMS, int SOURCES = 1>
__device__ __forceinline__ void post_reorder(const bits16* __restrict__ buf, const i64* __restrict__ src_offset,
                                             const i64* __restrict__ peer_stride, bits16* __restrict__ out, const bits16* __restrict__ bias,
                                             const bits16* residual, bits16* residual_out,
                                             const bits16* __restrict__ weight, int R, int N, int BN, int tiles_n,
                                             i64 ldo, float eps) {
    constexpr int W = 8;  // elements per chunk
    const int G = int(blockDim.x);
    const int tx = int(threadIdx.x);
    const int r = int(blockIdx.x * blockDim.y + threadIdx.y);
    const bool row_ok = r < R;
    const int rr = row_ok ? r : 0;  // keeps every address formed below inside the tensors
    const i64* table = src_offset + i64(rr) * tiles_n;
    const i64* stride_row = peer_stride + i64(rr) * tiles_n;  // read only when SOURCES > 1
    const bits16* res_row = residual + i64(rr) * N;
    bits16* rout_row = residual_out + i64(rr) * N;
    bits16* out_row = out + i64(rr) * ldo;
    const u32 ubn = u32(BN);
    const int ysplit = int(gridDim.y);
    const int y = int(blockIdx.y);

    // Units of work: VEC chunks (8 consecutive elements) or scalar stripes (8 G elements).
    const int units = VEC ? (N + W - 1) / W : (N + W * G - 1) / (W * G);

    float v[ITEMS][W];
    float ss = 0.f;
    // A plain RMSNorm (nothing applied before the norm) keeps the row as the 16-bit values it read
    // (exact, half the registers of fp32, so more rows fit on an SM: the host caps it at 48
    // registers) and loads the weight chunks with the row, so no load waits behind the reduction.
    // (The fused variants have no registers to spare for either.)
    constexpr bool kKeepRaw = NORM && VEC && !BIAS && !RES && !RES_OUT && ACT == ACT_NONE && SOURCES == 1;
    v4u32 raw[kKeepRaw ? ITEMS : 1];
    v4u32 wr[kKeepRaw ? ITEMS : 1];

    for (int k0 = 0;; k0 += ITEMS) {
        // Unit of item i for this thread (VEC: chunk index; scalar: stripe index).
        int unit[ITEMS];
        bool ok[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int k = k0 + i;
            unit[i] = VEC ? (k * ysplit + y) * G + tx : k * ysplit + y;
            ok[i] = row_ok && unit[i] < units;
        }
        if constexpr (!NORM) {
            // Whole group past the row end for every thread of this row: done. (Rows are
            // independent and no barrier is used without NORM, so exiting per thread is fine.)
            if (!ok[0]) break;
        }

        if constexpr (VEC) {
            v4u32 xr[ITEMS], br[ITEMS], rsr[ITEMS];
            v4u32 peer[ITEMS][SOURCES > 1 ? SOURCES - 1 : 1];
            i64 off[ITEMS], step[ITEMS];
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                if (ok[i]) {
                    const u32 j0 = u32(unit[i]) * W;
                    const u32 t = j0 / ubn;
                    off[i] = ld_nc_s64(table + t) + i64(j0 - t * ubn);
                    if constexpr (SOURCES > 1) step[i] = ld_nc_s64(stride_row + t);
                }
            }
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                if (ok[i]) {
                    const int j0 = unit[i] * W;
                    xr[i] = ld_nc_chunk(buf, off[i]);
                    if constexpr (SOURCES > 1) {
#pragma unroll
                        for (int s = 1; s < SOURCES; ++s) peer[i][s - 1] = ld_nc_chunk(buf, off[i] + s * step[i]);
                    }
                    if constexpr (BIAS) br[i] = ld_nc_v4(bias + j0);
                    if constexpr (RES) rsr[i] = ld_v4(res_row + j0);
                    if constexpr (kKeepRaw) wr[i] = ld_nc_v4(weight + j0);
                }
            }
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                if (ok[i]) {
                    const int j0 = unit[i] * W;
                    float f[W];
                    unpack8(T{}, xr[i], f);
                    if constexpr (SOURCES > 1) {
#pragma unroll
                        for (int s = 1; s < SOURCES; ++s) {
                            float q[W];
                            unpack8(T{}, peer[i][s - 1], q);
#pragma unroll
                            for (int e = 0; e < W; ++e) f[e] += q[e];
                        }
                    }
                    if constexpr (BIAS) {
                        float b[W];
                        unpack8(T{}, br[i], b);
#pragma unroll
                        for (int e = 0; e < W; ++e) f[e] += b[e];
                    }
#pragma unroll
                    for (int e = 0; e < W; ++e) f[e] = activate<ACT>(f[e]);
                    if constexpr (RES) {
                        float q[W];
                        unpack8(T{}, rsr[i], q);
#pragma unroll
                        for (int e = 0; e < W; ++e) f[e] += q[e];
                    }
                    if constexpr (RES_OUT) st_v4(rout_row + j0, pack8(T{}, f));
                    if constexpr (NORM) {
                        if constexpr (kKeepRaw) raw[i] = xr[i];
#pragma unroll
                        for (int e = 0; e < W; ++e) {
                            if constexpr (!kKeepRaw) v[i][e] = f[e];
                            ss += f[e] * f[e];
                        }
                    } else {
                        st_v4(out_row + j0, pack8(T{}, f));
                    }
                } else if constexpr (NORM && !kKeepRaw) {
#pragma unroll
                    for (int e = 0; e < W; ++e) v[i][e] = 0.f;
                }
            }
        } else {
            // Scalar path (not the fast path): per item, 8 coalesced 2-byte loads per operand.
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                bits16 xr[W], br[W], rsr[W];
                float xs[W];  // the sum of the other copies (SOURCES > 1)
#pragma unroll
                for (int e = 0; e < W; ++e) {
                    const int j = (unit[i] * W + e) * G + tx;
                    if (ok[i] && j < N) {
                        const u32 t = u32(j) / ubn;
                        const i64 o = ld_nc_s64(table + t) + i64(u32(j) - t * ubn);
                        xr[e] = ld_nc_u16(buf + o);
                        if constexpr (SOURCES > 1) {
                            const i64 st = ld_nc_s64(stride_row + t);
                            xs[e] = 0.f;
#pragma unroll
                            for (int s = 1; s < SOURCES; ++s) xs[e] += to_float(T{}, ld_nc_u16(buf + o + s * st));
                        }
                        if constexpr (BIAS) br[e] = ld_nc_u16(bias + j);
                        if constexpr (RES) rsr[e] = ld_u16(res_row + j);
                    }
                }
#pragma unroll
                for (int e = 0; e < W; ++e) {
                    const int j = (unit[i] * W + e) * G + tx;
                    float f = 0.f;
                    if (ok[i] && j < N) {
                        f = to_float(T{}, xr[e]);
                        if constexpr (SOURCES > 1) f += xs[e];
                        if constexpr (BIAS) f += to_float(T{}, br[e]);
                        f = activate<ACT>(f);
                        if constexpr (RES) f += to_float(T{}, rsr[e]);
                        if constexpr (RES_OUT) st_u16(rout_row + j, from_float(T{}, f));
                        if constexpr (NORM) {
                            ss += f * f;
                        } else {
                            st_u16(out_row + j, from_float(T{}, f));
                        }
                    }
                    if constexpr (NORM) v[i][e] = f;
                }
            }
        }
        if constexpr (NORM) break;  // the host guarantees ITEMS units cover the row
    }

    if constexpr (NORM) {
        // Every thread of the block gets here exactly once (rows past R included): one barrier.
        const float total = row_sum(ss);
        const float inv = rsqrtf(total / float(N) + eps);
        if (!row_ok) return;
        if constexpr (VEC) {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const int c = i * G + tx;  // == unit[i] of the load loop (NORM: one pass, YSPLIT 1)
                if (c < units) {
                    float w[W], f[W];
                    unpack8(T{}, kKeepRaw ? wr[i] : ld_nc_v4(weight + c * W), w);
                    if constexpr (kKeepRaw) unpack8(T{}, raw[i], f);
#pragma unroll
                    for (int e = 0; e < W; ++e) f[e] = (kKeepRaw ? f[e] : v[i][e]) * inv * w[e];
                    st_v4(out_row + c * W, pack8(T{}, f));
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
#pragma unroll
                for (int e = 0; e < W; ++e) {
                    const int j = (i * W + e) * G + tx;
                    if (j < N) st_u16(out_row + j, from_float(T{}, v[i][e] * inv * to_float(T{}, ld_nc_u16(weight + j))));
                }
            }
        }
    }
}

}  // namespace fo
