// The portable GEMM's epilogue: a tile's accumulators go to a separate shared-memory C tile (so it
// never waits for the operand ring; 16-byte chunks swizzled by row & 7), then by 16-byte coalesced
// stores to where the epilogue policy (epilogue.cuh) says: C row-major, the communication buffer
// through the row table (its BM row offsets fetched with the tile's first loads), or each tile at
// its place (SignalStore: or row-major into the communication buffer, per launch). The signal's
// release and the probe's stamps are the kernel's (gemm_mma.cuh: the release rides on the producer's
// once-per-tile branch).
//
// NOTES: the pointers the kernel takes __restrict__ are __restrict__ here too: the compiler keeps a
// read-only load's non-coherent path only where the pointer it reads through is declared so.
#pragma once

#include "epilogue.cuh"
#include "mma_ptx.cuh"
#include "mma_shape.cuh"

namespace fo {

// At the tile's top, in the cp.async group of its first loads (they land during the main loop instead
// of costing a dependent global load per 16-byte store): the row table's BM row offsets of tile
// (tm, tn), or (placed) its 32-byte place, which replaces them and the per-store shared load of one.
template <class S, class Epi, int BM>
__device__ __forceinline__ void mma_fetch_rows(u32 smem_ro, const i64* __restrict__ row_offset, bool placed, int tm,
                                               int tn, int tiles_n, int M, int tid) {
    using namespace mma_detail;
    if (Epi::kRowTable && tid < BM) {
        const int grow = tm * BM + tid;
        const bool ok = grow < M;
        cp_async8(smem_ro + tid * 8, ok ? row_offset + i64(grow) * tiles_n + tn : row_offset, ok);
    }
    if (placed && tid < 2) cp_async16(smem_ro + tid * 16, row_offset + i64(tm * tiles_n + tn) * 4 + tid * 2, true);
}

// The warp's accumulators to the C tile at smem_c (16-bit).
template <class S, class T, int BN>
__device__ __forceinline__ void mma_stage_c(const float (&acc)[S::MI][S::NI][4], u32 smem_c, int wm, int wn,
                                            int lane) {
    using namespace mma_detail;
#pragma unroll
    for (int mi = 0; mi < S::MI; ++mi) {
#pragma unroll
        for (int ni = 0; ni < S::NI; ++ni) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = wm * S::WM + mi * 16 + (lane >> 2) + h * 8;
                const int chunk = (wn * S::WN + ni * 8) >> 3;
                st_shared_b32(smem_c + row * (BN * 2) + ((chunk ^ (row & 7)) << 4) + (lane & 3) * 4,
                              pack2(T{}, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]));
            }
        }
    }
}

// The C tile's 16-byte chunks from shared memory to where the policy says, for tile (tm, tn) of an
// M x N product (placed: at the place (place_at, sub_stride, shift) fetched with the tile).
template <class S, class Epi, int BM, int BN, int WARPS>
__device__ __forceinline__ void mma_store_tile(u32 smem_c, u32 smem_ro, bits16* __restrict__ C, i64 ldc,
                                               bits16* __restrict__ comm_buf, const i64* __restrict__ row_offset, i64 place_at,
                                               i64 sub_stride, int shift, int tm, int tn, int M, int N, int warp,
                                               int lane) {
    using namespace mma_detail;
    const bool placed = Epi::kRowsOrPlaces && row_offset != nullptr;
    const int rows = min(BM, M - tm * BM);
    const int cols = min(BN, N - tn * BN);
    // 16-byte chunks from smem C to global. Warp w stores the rows w * BM / WARPS onwards, whole
    // rows at a time (C_ROW_STEP rows per store instruction): lane l stores chunk st_ch of rows
    // st_r0, st_r0 + C_ROW_STEP, ... NOTES: the rows are written as a base plus a step (not as a
    // division per store, which had the compiler keep every store's smem address in registers
    // across the k-loop); the CTA's warps write rows BM / WARPS apart rather than 16 consecutive
    // rows at once, which measured faster for the row-table store.
    constexpr int ROWS_PER_WARP = BM / WARPS;
    const int st_r0 = warp * ROWS_PER_WARP + lane / S::C_CPR;
    const int st_ch = lane % S::C_CPR;
    auto st_row = [&](int i) { return st_r0 + i * S::C_ROW_STEP; };
    auto st_smem_at = [&](int i) {
        const int r = st_row(i);
        return smem_c + r * (BN * 2) + ((st_ch ^ (r & 7)) << 4);
    };
    const int st_n = cols - st_ch * 8;  // columns left from this thread's chunk
    // Any layout: row r at row_dst(r); a partial or unaligned chunk is stored element by element.
    auto store_rows = [&](auto row_dst) {
#pragma unroll
        for (int i = 0; i < S::C_STORES; ++i) {
            const int r = st_row(i);
            if (r < rows && st_n > 0) {
                u32 v[4];
                ld_shared_v4(st_smem_at(i), v);
                bits16* dst = row_dst(r) + st_ch * 8;
                if (st_n >= 8 && (reinterpret_cast<unsigned long long>(dst) & 15) == 0) {
                    st_global_v4(dst, v);
                } else {
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        if (e < st_n) dst[e] = bits16(v[e >> 1] >> ((e & 1) * 16));
                }
            }
        }
    };
    // Row r at base + r * stride (row-major C, a whole tile at its place). NOTES: when every row
    // of the thread is a whole aligned chunk, a store is its row guard, the smem load and the
    // 16-byte store (address: one add); store_rows' per-store address and checks are several
    // times that, a large share of a tile when K is small.
    auto store_strided = [&](bits16* base, i64 stride) {
        bits16* p = base + i64(st_r0) * stride + st_ch * 8;
        if (st_n >= 8 && ((reinterpret_cast<unsigned long long>(p) | u64(stride) * 2) & 15) == 0) {
            const i64 step = i64(S::C_ROW_STEP) * stride;
#pragma unroll
            for (int i = 0; i < S::C_STORES; ++i) {
                if (st_row(i) < rows) {
                    u32 v[4];
                    ld_shared_v4(st_smem_at(i), v);
                    st_global_v4(p, v);
                }
                p += step;
            }
        } else {
            store_rows([&](int r) { return base + i64(r) * stride; });
        }
    };
    if (Epi::kRowTable) {
        store_rows([&](int r) { return comm_buf + ld_shared_s64(smem_ro + r * 8); });
    } else if (Epi::kRowsOrPlaces) {
        bits16* const place = comm_buf + place_at;
        const bool subtiles = placed && (BM - 1) >> shift != 0;
        bits16* const base = placed ? place : C + i64(tm * BM) * ldc + tn * BN;
        const i64 stride = placed ? i64(cols) : ldc;
        if (!subtiles) {
            store_strided(base, stride);  // row-major C, or a tile with no subtiles
        } else {
            store_rows([&](int r) {
                return place + i64(r >> shift) * sub_stride + i64(u32(r) & ((1u << shift) - 1u)) * cols;
            });
        }
    } else {
        store_strided(C + i64(tm * BM) * ldc + tn * BN, ldc);
    }
}

}  // namespace fo
