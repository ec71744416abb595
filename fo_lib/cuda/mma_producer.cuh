// The portable GEMM's producer: every thread's cp.async loads of the operand ring, as a cursor over
// the CTA's (tile, k-tile) stream that runs across tile boundaries: while a CTA finishes one tile
// (last k-tiles and the epilogue) it already fetches the first STAGES-1 k-tiles of its next tile.
// The cursor's state is the kernel's (ld_s, ld_kt, ld_stage, ld_a, ld_b, ld_a_rows, ld_b_rows); these
// are its steps (docs/decisions.md, "The cp.async producer is straight-line code from a pointer
// cursor").
//
// NOTES: the per-k-tile loads are straight-line code (no branch), so the scheduler interleaves them
// with the MMAs; everything that depends on the tile (raster, row pointers, how many of the thread's
// rows exist) is computed once per tile in mma_start_tile, outside the MMA stream. Computing the
// addresses and row guards of all 12 loads per k-tile inside `if (tile < tiles)` put a long serial
// chain in front of the MMAs of every k-tile.
#pragma once

#include "mma_ptx.cuh"
#include "mma_shape.cuh"
#include "tile_schedule.cuh"

namespace fo {

// The cursor at the first k-tile of schedule index s: this thread's A rows 0 .. a_rows-1 and B rows
// 0 .. b_rows-1 exist (M / N tails; both 0 past the last tile) and start at a and b (row0: the
// thread's first row of the tile, chunk: its 16-byte chunk of a row).
template <class S, int BM, int BN>
__device__ __forceinline__ void mma_start_tile(int& a_rows, int& b_rows, int s, int tiles, const TileRaster& raster,
                                               int row0, int M, int N, int chunk, const bits16*& b,
                                               const bits16* B, i64 ldb, const bits16*& a, const bits16* A, i64 lda) {
    a_rows = b_rows = 0;
    if (s < tiles) {
        int tm, tn;
        raster.tile(s, tm, tn);
        const int ra = tm * BM + row0;
        const int rb = tn * BN + row0;
        a_rows = ra < M ? min(S::A_LOADS, (M - ra + S::ROW_STEP - 1) / S::ROW_STEP) : 0;
        b_rows = rb < N ? min(S::B_LOADS, (N - rb + S::ROW_STEP - 1) / S::ROW_STEP) : 0;
        // The first row is clamped inside the operand; the addresses of rows past the count
        // (beyond M or N) are formed but never read.
        a = A + i64(min(ra, M - 1)) * lda + chunk * 8;
        b = B + i64(min(rb, N - 1)) * ldb + chunk * 8;
    }
}

// The loads of the cursor's k-tile kt into ring stage `stage` (dst: this thread's offset in a stage),
// one cp.async group; the cursor then stands at the next k-tile.
template <class S, int BK, int STAGES>
__device__ __forceinline__ void mma_issue_load(u32 smem, int& stage, u32 dst, int& kt, int chunk, int K, int a_rows,
                                               int b_rows, const bits16*& a, i64 a_row_step, const bits16*& b,
                                               i64 b_row_step) {
    using namespace mma_detail;
    const u32 sa = smem + stage * S::STAGE_BYTES + dst;
    const u32 sb = sa + S::A_STAGE_BYTES;
    // K % 8 == 0: a 16-byte chunk is all in or all out. A load past the row count (or the K
    // tail) reads nothing (zero-fill), so its address is never used.
    const bool k_ok = kt * BK + chunk * 8 < K;
    const int a_in = k_ok ? a_rows : 0;
    const int b_in = k_ok ? b_rows : 0;
    const bits16* pa = a;
#pragma unroll
    for (int i = 0; i < S::A_LOADS; ++i) {
        cp_async16(sa + i * S::ROW_STEP * BK * 2, pa, i < a_in);
        pa += a_row_step;
    }
    const bits16* pb = b;
#pragma unroll
    for (int i = 0; i < S::B_LOADS; ++i) {
        cp_async16(sb + i * S::ROW_STEP * BK * 2, pb, i < b_in);
        pb += b_row_step;
    }
    // NOTES: commit even when nothing was issued, so "k-tile g is complete" is always
    // "at most STAGES-2 groups pending".
    cp_async_commit();
    a += BK;
    b += BK;
    ++kt;
    stage = stage + 1 == STAGES ? 0 : stage + 1;
}

}  // namespace fo
