// The Hopper GEMM's epilogue: a tile's accumulators leave the consumers' registers as 16-bit values
// and go where the epilogue policy (epilogue.cuh: C, the row table, the tile's place) says, and the
// tile is published (the signal, the probe's end stamp) once it is in global memory.
//
//   * Staged (the default): the consumers write the tile to the C staging tile in shared memory
//     (stmatrix, 16-byte chunks placed by Sm90Shape::c_chunk) and go straight on to their next
//     unit; the store warps (warps 1-3 of the producer warpgroup) store it to global memory and
//     publish it, so the global stores, the fence and the atomic are off the consumers' path
//     (docs/decisions.md, "A warp-specialized persistent kernel whose store warps store and signal").
//   * DIRECT_C (ping-pong only): no C staging tile. Each consumer warp takes its 16 rows of each half
//     through two 16 x 64 buffers of its own (stmatrix, then 16-byte stores of 4 rows x 128 bytes
//     per warp instruction) to global memory itself, under the other warpgroup's MMAs; the store
//     warps only publish the tile. The 32 KB of buffers in place of the C tile give BN 168-176 a
//     fifth stage (docs/decisions.md, "Ping-pong consumers store C themselves at 168 and 176 wide").
//     (The row-offset area stays reserved, unused.)
//
// NOTES: a pointer the kernel takes __restrict__ is __restrict__ in the roles that use it where the
// one-function kernel used it so (sm90_direct_row's were a closure's captures, without it): the
// compiler keeps a read-only load's non-coherent path (ld.global.nc) only where the pointer it reads
// through is declared so.
//
// Fragment of wgmma m64nNk16: acc[h][4 j + 2 g + e] is row 16 warp + lane / 4 + 8 g, column
// 8 j + 2 (lane % 4) + e of the half's 64 x BN block.
#pragma once

#include "epilogue.cuh"
#include "sm90_mainloop.cuh"

namespace fo {

// The accumulator blocks j and j + 1 of a wgmma m64nNk16 fragment (both row halves), 16-bit, by one
// stmatrix x4 at this lane's address (see sm90_stage_c for the lane-to-row mapping).
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

// DIRECT_C with a row table or tile places: where row r of tile (tm, tn) goes (null past M). The
// consumers fetch the row of both halves each lane holds for its warp before the main loop, so the
// loads' latency hides under it (fetched at each store, a chain of dependent loads held up the last
// tile's stores, the kernel's tail); each store takes its row's pointer from the lane that holds it.
template <class S, class Epi>
__device__ __forceinline__ bits16* sm90_direct_row(int M, int tm, bits16* comm_buf, const i64* row_offset, int tiles_n,
                                                   int tn, int N, int r) {
    constexpr int BM = S::BM, BN = S::BN;
    if (r >= M - tm * BM) return nullptr;
    if (Epi::kRowTable) return comm_buf + row_offset[i64(tm * BM + r) * tiles_n + tn];
    const i64* place = row_offset + i64(tm * tiles_n + tn) * 4;
    return comm_buf + epi::placed_row(place[0], place[1], int(place[2]), r, min(BN, N - tn * BN));
}

// The consumers' half of a tile's epilogue: acc to the C staging tile (DIRECT_C: through the warp's
// buffers to global memory, `lane_row` from sm90_direct_row). The caller has waited on c_empty and
// arrives on c_full after it.
template <class S, bool STREAM_K, class T, class Epi>
__device__ __forceinline__ void sm90_stage_c(const Sm90Smem<S>& sm, const Sm90Warpgroup<S, STREAM_K>& g,
                                             const float (&acc)[Sm90Warpgroup<S, STREAM_K>::H][S::ACC],
                                             const Sm90Tiles& t, bits16* __restrict__ C, i64 ldc, int tm,
                                             int tn, bits16* lane_row) {
    constexpr int H = Sm90Warpgroup<S, STREAM_K>::H, BM = S::BM, BN = S::BN;
    constexpr bool kStoreRow = Epi::kRowTable || Epi::kPlaces;  // a row pointer per row, not C
    const int c = g.c, warp = g.warp, lane = g.lane;
    if (S::DIRECT_C) {
        // Each warp its own 16 rows of each half, 64 columns at a time: stmatrix into one of its
        // two buffers, then every lane stores 4 chunks (a warp store: 4 rows x 128 bytes). The two
        // warpgroups' buffers are apart.
        const int cols = min(BN, t.N - tn * BN);
        const u32 wbuf = sm.smem_c + (c * 4 + warp) * (2 * S::WARP_C_BYTES);
        const int lr = ((lane >> 3) & 1) * 8 + (lane & 7);  // the buffer row this lane addresses
#pragma unroll
        for (int h = 0; h < H; ++h) {
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
                // (not unrolled: a whole tile's accumulators are live here)
#pragma unroll 1
                for (int i = 0; i < 4; ++i) {
                    const int r = h * 64 + warp * 16 + (lane >> 3) + 4 * i;
                    bits16* trow = nullptr;  // (from the lane that holds row r; every lane shuffles)
                    if (kStoreRow)
                        trow = reinterpret_cast<bits16*>(__shfl_sync(
                            0xffffffffu, reinterpret_cast<unsigned long long>(lane_row), h * 16 + (lane >> 3) + 4 * i));
                    const bool row_in = kStoreRow ? trow != nullptr : r < t.M - tm * BM;
                    if (row_in && ch * 8 < cols) {  // (ch * 8 < cols <= BN: a chunk of the tile)
                        u32 v[4];
                        sm90::ld_shared_v4(S::warp_c_chunk(buf, (lane >> 3) + 4 * i, lane & 7), v);
                        bits16* row = kStoreRow ? trow : C + i64(tm * BM + r) * ldc + tn * BN;
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
            const int st_row = (S::PINGPONG ? h : c) * 64 + warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
            for (int j = 0; j + 1 < BN / 8; j += 2) {
                stmatrix_acc<T>(S::c_chunk(sm.smem_c, st_row, j + (lane >> 4)), acc[h], j);
            }
            if (BN % 16) stmatrix_acc_last<T>(S::c_chunk(sm.smem_c, st_row, BN / 8 - 1), acc[h], BN / 8 - 1);
        }
    }
}

// The store warps (warps 1-3 of the producer warpgroup): for each of the CTA's units with a C tile,
// once the consumers have staged it, its stores to global memory (DIRECT_C: none) and its
// publication. Pass g of store warp sw (g = sw, sw + 3, ...) covers the tile's 16-byte chunks
// 32 g .. 32 g + 31 in row-major order, one per lane: a warp store writes a whole 512-byte row
// (BN 256), two 256-byte rows (BN 128), or the end of one row and the start of the next.
template <class S, int CLUSTER, class Epi>
__device__ __forceinline__ void sm90_store_tiles(const Sm90Smem<S>& sm, const Sm90Tiles& t, bits16* __restrict__ C,
                                                 i64 ldc, bits16* __restrict__ comm_buf,
                                                 const i64* __restrict__ row_offset, const int* __restrict__ tile_group,
                                                 u32* group_counter, u64* __restrict__ probe, int sk_tiles,
                                                 int sk_split, const i64* sk_bounds, int tid, int lane) {
    using namespace sm90;
    constexpr int BM = S::BM, BN = S::BN;
    constexpr bool kStaged = !S::DIRECT_C;
    const int st = tid - 32;
    const int sw = st / 32;
    u32 parity = 0;
#pragma unroll 1
    for (Sm90Work w(t.tiles, sk_tiles, sk_split, t.KT, CLUSTER, sk_bounds); w.next();) {
        // No C tile: a phantom, or a part that goes to sk_partial.
        if (w.s >= t.tiles || w.part == kHeadTile || w.part == kTailPark) continue;
        int tm, tn;
        t.raster.tile(w.s, tm, tn);
        const int rows = min(BM, t.M - tm * BM);
        const int cols = min(BN, t.N - tn * BN);
        if (Epi::kRowTable && kStaged) {
            // The tile's row offsets, fetched while the consumers still compute it.
            for (int r = st; r < rows; r += S::STORE_THREADS)
                st_shared_s64(sm.smem_ro + r * 8, row_offset[i64(tm * BM + r) * t.tiles_n + tn]);
        }
        i64 place_base = 0, place_sub_stride = 0;
        int place_shift = 0;
        if (Epi::kPlaces && kStaged) {  // the tile's place, in registers (the store warps have them to spare)
            const i64* place = row_offset + i64(tm * t.tiles_n + tn) * 4;
            place_base = place[0];
            place_sub_stride = place[1];
            place_shift = int(place[2]);
        }
        hang_where(1, int(parity), w.s, w.part, -1);
        mbar_wait(sm.bar_c_full, parity);
        if (Epi::kRowTable && kStaged) bar_sync(1, S::STORE_THREADS);  // row offsets visible to all store warps
#pragma unroll 2
        for (int g = sw; kStaged && g * 32 < rows * S::C_CHUNKS; g += 3) {
            const int r = (g * 32 + lane) / S::C_CHUNKS;
            const int ch = g * 32 + lane - r * S::C_CHUNKS;
            if (r < rows && ch * 8 < cols) {
                u32 v[4];
                ld_shared_v4(S::c_chunk(sm.smem_c, r, ch), v);
                bits16* dst;
                if (Epi::kRowTable) {
                    dst = comm_buf + ld_shared_s64(sm.smem_ro + r * 8) + ch * 8;
                } else if (Epi::kPlaces) {
                    dst = comm_buf + epi::placed_row(place_base, place_sub_stride, place_shift, r, cols) + ch * 8;
                } else {
                    dst = C + i64(tm * BM + r) * ldc + tn * BN + ch * 8;
                }
                store_c_chunk(dst, v, cols - ch * 8);
            }
        }
        // This thread's reads of smem C are done (their values are in the stores above);
        // DIRECT_C: it has seen the consumers' hand-over of the tile, stored by themselves.
        mbar_arrive(sm.bar_c_empty);
        // Every store warp's global stores (and reads of smem_ro) precede the publication
        // below and the next tile's row-offset fetch.
        if (kStaged) bar_sync(1, S::STORE_THREADS);
        if ((Epi::kSignal || Epi::kProbe) && st == 0) {
            const int tile_id = tm * t.tiles_n + tn;
            if (Epi::kSignal) {
                // bar.sync orders the other store threads' stores before this thread at CTA
                // scope (DIRECT_C: the consumers' stores precede their release arrivals on
                // c_full, which this thread acquired); the release is cumulative (the same
                // protocol as the portable kernel).
                epi::signal_tile(group_counter, tile_group, tile_id);
            } else {
                epi::probe_end(probe, tile_id);
            }
        }
        parity ^= 1u;
    }
    hang_where(1, 0, -1, -1, -9);  // done
}

}  // namespace fo
