// Schedule index -> output tile, the device twin of fo_lib.tiling.raster_tile.
//
// NOTES: keep TileRaster::tile line for line parallel to the Python (tests/gpu/test_gemm_gpu.py runs
// both over many grids). A persistent CTA b of P runs s = b, b + P, ..., so this function alone
// decides which tiles share a wave: the overlap model in fo_lib.tiling is only right if the two agree
// exactly.
#pragma once

namespace fo {

// n / d for a divisor fixed at run time (1 <= d < 2^31) and 0 <= n < 2^31: a multiply-high, an add
// and a shift (the round-up method of Granlund and Montgomery, with the 33-bit multiplier 2^32 + mul).
// NOTES: the GEMMs map a tile per schedule index; with `/` and `%` that took two ~25-instruction
// integer divisions per tile, serial at the tile's top in the signal kernels, where ncu's stall
// samples found them on short-K GEMMs.
struct FastDiv {
    unsigned mul;
    int shift;
    int d;

    __device__ __forceinline__ void init(int divisor) {
        d = divisor;
        shift = 32 - __clz(divisor - 1);  // ceil(log2 d); 0 for d = 1
        const unsigned long long two32 = 1ull << 32;
        mul = unsigned(two32 * ((1ull << shift) - unsigned(divisor)) / unsigned(divisor) + 1);
    }
    __device__ __forceinline__ int div(int n) const {
        const unsigned t = __umulhi(unsigned(n), mul);
        return int((t + unsigned(n)) >> shift);  // n < 2^31: the sum fits 32 bits
    }
};

// order 0 = "row": bands of `swizzle` tile rows, walked column by column, down the band inside a
// column (swizzle 1 = row-major, N fastest). order 1 = "col": the same walk on the transposed grid.
// An edge band narrower than `swizzle` uses the rows it has, so every tile is visited once.
// Built once per CTA (the divisors' constants), then tile(s) per schedule index.
struct TileRaster {
    int major;
    int swizzle;
    bool col;
    FastDiv band;   // by swizzle * minor: tiles per band
    FastDiv width;  // by swizzle: a full band's width
    FastDiv edge;   // by major % swizzle: the last band's width, when narrower

    __device__ __forceinline__ TileRaster(int tiles_m, int tiles_n, int order, int swizzle_) {
        col = order != 0;
        major = col ? tiles_n : tiles_m;
        const int minor = col ? tiles_m : tiles_n;
        // NOTES: a swizzle wider than the grid walks exactly like swizzle == major (one band holds
        // every tile, band_width = major); clamping keeps swizzle * minor from overflowing int.
        swizzle = swizzle_ > major ? major : swizzle_;
        band.init(swizzle * minor);
        width.init(swizzle);
        const int last = major % swizzle;
        edge.init(last > 0 ? last : 1);
    }

    __device__ __forceinline__ void tile(int s, int& tm, int& tn) const {
        const int b_idx = band.div(s);
        const int in_band = s - b_idx * band.d;
        const int rest = major - b_idx * swizzle;
        const bool narrow = rest < swizzle;  // band_width = min(swizzle, rest)
        const FastDiv w = {narrow ? edge.mul : width.mul, narrow ? edge.shift : width.shift,
                           narrow ? edge.d : width.d};
        const int b = w.div(in_band);
        const int a = b_idx * swizzle + (in_band - b * w.d);
        if (!col) {
            tm = a;
            tn = b;
        } else {
            tm = b;
            tn = a;
        }
    }
};

// One index, for code outside a tile loop (the raster check kernel).
__device__ __forceinline__ void raster_tile(int s, int tiles_m, int tiles_n, int order, int swizzle,
                                            int& tm, int& tn) {
    TileRaster(tiles_m, tiles_n, order, swizzle).tile(s, tm, tn);
}

}  // namespace fo
