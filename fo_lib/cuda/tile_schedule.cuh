// Schedule index -> output tile, the device twin of fo_lib.tiling.raster_tile.
//
// NOTES: keep this line for line parallel to the Python (tests/gpu/test_gemm_gpu.py runs both over
// many grids). A persistent CTA b of P runs s = b, b + P, ..., so this function alone decides which
// tiles share a wave: the overlap model in fo_lib.tiling is only right if the two agree exactly.
#pragma once

namespace fo {

// order 0 = "row": bands of `swizzle` tile rows, walked column by column, down the band inside a
// column (swizzle 1 = row-major, N fastest). order 1 = "col": the same walk on the transposed grid.
// An edge band narrower than `swizzle` uses the rows it has, so every tile is visited once.
__device__ __forceinline__ void raster_tile(int s, int tiles_m, int tiles_n, int order, int swizzle,
                                            int& tm, int& tn) {
    const int major = order == 0 ? tiles_m : tiles_n;
    const int minor = order == 0 ? tiles_n : tiles_m;
    // NOTES: a swizzle wider than the grid walks exactly like swizzle == major (one band holds every
    // tile, band_width = major); clamping keeps swizzle * minor from overflowing int.
    if (swizzle > major) swizzle = major;
    const int band = s / (swizzle * minor);
    const int in_band = s - band * swizzle * minor;
    const int rest = major - band * swizzle;
    const int band_width = swizzle < rest ? swizzle : rest;
    const int a = band * swizzle + in_band % band_width;
    const int b = in_band / band_width;
    if (order == 0) {
        tm = a;
        tn = b;
    } else {
        tm = b;
        tn = a;
    }
}

}  // namespace fo
