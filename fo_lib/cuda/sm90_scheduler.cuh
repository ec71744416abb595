// The Hopper GEMM's tile scheduler: which units of work each persistent CTA runs, in order, with the
// stream-K tail (both forms planned by the host: fo_lib.gemm.stream_k.stream_k_plan). Producer,
// store warps and consumers each walk the same sequence (for (Sm90Work w(...); w.next();)).
//
//   * Whole tiles: CTA b of P runs schedule indices s = b, b + P, ... through fo::raster_tile
//     (tile_schedule.cuh), the same function as the portable kernel, so fo_lib.tiling's wave model
//     holds.
//   * Clusters (CLUSTER 2): P is even, so cluster ranks 0 and 1 run schedule indices 2 i and
//     2 i + 1 in step. An odd tile count gives the CTA paired with the last tile's a phantom unit
//     (schedule index s == tiles: no loads, no MMA, no store) so both CTAs walk the same k-blocks; no
//     stream-K tail in clusters.
//   * Split tail (sk_split >= 2, sk_tiles * sk_split <= P): each of the last sk_tiles tiles (the
//     partial last wave) runs as sk_split k ranges on as many CTAs, all starting together after the
//     whole tiles; the other parts go to slot 2 b of sk_partial and add 1 to the tile's flag, the
//     last range waits for sk_split - 1, adds them (latest k range first: deterministic) and runs
//     the epilogue (sm90_fixup.cuh).
//   * Stream-K runs (sk_split 1, P <= sk_tiles < 2 P, else ignored): the last sk_tiles schedule
//     indices are not given out whole but as one run of sk_tiles * KT k-blocks split evenly over the
//     P CTAs (or, with sk_bounds, CTA b's run is k-blocks [sk_bounds[b], sk_bounds[b + 1]), each at
//     least KT long: the host's runs of unequal length where tiles cost unequal time,
//     fo_lib.gemm.stream_k.stream_k_weighted), each CTA's run after its whole tiles (a partial last
//     wave would leave SMs idle; here every CTA does the same work). A run is longer than a tile,
//     so a cut tile has two parts: its head (k-block 0 on, the end of CTA b's run) and its tail (up
//     to its last k-block, the start of CTA b + 1's). Each CTA runs its head first, then its tail,
//     then its whole tiles: every CTA starts at k-block 0 at the same moment, so many CTAs read the
//     same operand slabs at once and L2 serves them (in run order each CTA would start at its own k
//     and every slab would come from DRAM; after the heads the offsets spread again, less than in
//     run order). The head's CTA publishes its fp32 accumulators; the tail's CTA finishes the tile:
//     at once, adding the head to its registers, when the head (CTA b - 1's first unit) is due
//     before this tail ends; otherwise it parks the tail and finishes the tile after its whole
//     tiles, so no CTA idles on a head and no CTA waits on one that waits (sm90_fixup.cuh). A CTA
//     waits only on CTA b - 1's head, which waits on nothing: CTA b - 1 must be running no later
//     than CTA b (blocks are dispatched in index order, and the persistent grid fits the GPU).
#pragma once

#include "common.cuh"
#include "tile_schedule.cuh"

namespace fo {

// A GEMM's tiles: the grid of BM x BN tiles over M x N, its raster (schedule index -> tile), and
// the k-blocks of K (KT; the last k-block's columns past K are zero-filled by TMA). The kernel
// computes each as a local of its own and hands the roles this copy.
struct Sm90Tiles {
    int M, N, tiles_m, tiles_n, tiles;
    TileRaster raster;
    int KT;
};

// What a CTA does with one unit of work (see the note at the top).
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

}  // namespace fo
