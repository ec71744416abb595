"""Synthetic Hopper tile tables for the CPU tests of the config picker and of the scripts that record
and read them: rows of chosen wave times, written as CSV (into tests/conftest.py's ``data_dir``)."""
import csv

from fo_lib.gemm import sm90, tile_table

BIG, SMALL = "128x256x64", "128x128x64"
# The recording grid of scripts/bench/record_sm90_tiles.py on 132 SMs (33 x 32 tiles of 128 x 256 =
# 8 waves; 16 waves of 128 x 128).
GRID = (4224, 8192)


def table_rows(ms_big, ms_small, rasters=(("row", 1), ("row", 8)), ks=(1024, 4096), grid=GRID, extra=None):
    """Rows with a wave of the big tile taking ``ms_big(order, swizzle) * K / 4096`` ms (likewise small)."""
    rows = []
    for name, ms in ((BIG, ms_big), (SMALL, ms_small)):
        for order, sw in rasters:
            for k in ks:
                rows.append(dict(config=name, tile_name=sm90.CONFIGS[name].tile_name, order=order, swizzle=sw,
                                 M=grid[0], N=grid[1], K=k, waves=8 if name == BIG else 16,
                                 ms_per_wave=ms(order, sw) * k / 4096, tflops=1.0))
    return rows + list(extra or ())


def write_csv(path, rows, columns=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns or list(rows[0]), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def write_table(data_dir, rows):
    return write_csv(data_dir / "h200" / tile_table.TABLE_NAME, rows)
