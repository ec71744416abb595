// The epilogues of both GEMM families as named policy types: where a finished tile's rows go (the
// tile write: C row-major, or the pre-communication reorder into the communication buffer through a
// row table or at each tile's place) and what is published once the tile is there (the signal: a
// release add on the tile's group counter; the probe: timestamps, SM and CTA of the tile). A
// generated instantiation source names one as the kernel's template argument (its Python name:
// fo_lib.gemm.config.EPILOGUE_POLICY); a family compiles the policies it has and refuses the others
// at compile time (the portable kernel stores rows and places in one kernel, SignalStore; the Hopper
// kernel compiles SignalRows and SignalTiles apart).
#pragma once

#include "common.cuh"

namespace fo {
namespace epi {

// Where row r of tile (tm, tn) goes.
enum class Dest : int {
    kC,              // C row-major (ldc): C itself, or the communication buffer passed as C (SignalRows)
    kRowTable,       // comm_buf + row_offset[(tm * BM + r) * tiles_n + tn]: any row order (the reorder)
    kPlaces,         // comm_buf at the tile's place: row_offset holds int64 [tiles, 4] = {base,
                     // sub_stride, sub_shift, 0}, row r at placed_row(base, sub_stride, sub_shift, r, cols)
    kRowsOrPlaces,   // kC into the communication buffer where row_offset is null, else kPlaces
};

// (The traits are enumerators: with -default-device a static data member would be emitted into every
// kernel as a global.)
template <Dest DEST, bool SIGNAL, bool PROBE>
struct Policy {
    enum : bool {
        kRowTable = DEST == Dest::kRowTable,
        kPlaces = DEST == Dest::kPlaces,
        kRowsOrPlaces = DEST == Dest::kRowsOrPlaces,
        // After the tile's stores: group_counter[tile_group[tile]] += 1 (release, gpu scope), the
        // counting-table protocol (docs/decisions.md, "A tile is released by one thread's release
        // add after a barrier").
        kSignal = SIGNAL,
        // probe[tile] = {start ns, end ns, smid, CTA}: start when the tile's main loop begins, end
        // when its stores are issued (when a signal would be sent).
        kProbe = PROBE,
    };
};

struct Plain : Policy<Dest::kC, false, false> {};
struct Signal : Policy<Dest::kRowTable, true, false> {};
struct Probe : Policy<Dest::kC, false, true> {};
// The reorder alone, no signal (the non-overlapped path, the ablation of the signal's cost).
struct Scatter : Policy<Dest::kRowTable, false, false> {};
// The AllReduce rows layout: C row-major into the communication buffer, then the signal.
struct SignalRows : Policy<Dest::kC, true, false> {};
// The tile and subtile layouts without a row table: each tile at its place, then the signal.
struct SignalTiles : Policy<Dest::kPlaces, true, false> {};
// SignalRows or SignalTiles, chosen per launch by row_offset (null, or the places): one kernel for both.
struct SignalStore : Policy<Dest::kRowsOrPlaces, true, false> {};

// Element offset of row r of a tile placed at (base, sub_stride, shift) with `cols` columns.
__device__ __forceinline__ i64 placed_row(i64 base, i64 sub_stride, int shift, int r, int cols) {
    return base + i64(r >> shift) * sub_stride + i64(u32(r) & ((1u << shift) - 1u)) * cols;
}

// The signal of tile `tile_id`, by the one thread that a barrier has ordered after every store of the
// tile: red.release.gpu is cumulative, so a waiter that acquires the counter sees the whole tile.
__device__ __forceinline__ void signal_tile(u32* group_counter, const int* __restrict__ tile_group, int tile_id) {
    red_release_gpu_add(group_counter + tile_group[tile_id], 1u);
}

// The probe's stamps: the start of tile (tm, tn) of a grid `tiles_n` tiles wide, and the end of tile
// `tile_id` with where it ran.
__device__ __forceinline__ void probe_start(u64* __restrict__ probe, int tm, int tn, int tiles_n) {
    probe[(tm * tiles_n + tn) * 4 + 0] = globaltimer_ns();
}
__device__ __forceinline__ void probe_end(u64* __restrict__ probe, int tile_id) {
    probe[tile_id * 4 + 1] = globaltimer_ns();
    probe[tile_id * 4 + 2] = smid();
    probe[tile_id * 4 + 3] = blockIdx.x;
}

}  // namespace epi
}  // namespace fo
