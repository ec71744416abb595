"""fo_lib.reports.gemm_log: the benchmark's printed tables read back from a GPU call's log."""
import pytest

from fo_lib.reports.gemm_log import read_log_tables

LOG = """=== build (limit 120s): python3 -m fo_lib build
=== bench_gemm (limit 240s): python3 scripts/bench/bench_gemm.py --graph --rounds 30 --control --out x.csv
     M      N      K                   config   torch    ours     x  signal  scat%   sig%  vs_torch
  1024   4096   1024 m256n128k64_w4x2_s3/row1   540.5   356.2  0.66   342.3   +1.6   +4.0  0.0e+00
  1024   4096   4096 m256n128k64_w4x2_s3/row1   753.1   444.8  0.59   438.7   -0.2   +1.4  0.0e+00
ours / torch.matmul (bf16): geomean 0.573 over 30 shapes; M,N,K >= 2048: median 0.551, min 0.542
=== bench_gemm rc=0 in 36s
=== exp_gemm (limit 150s): env FO_NVRTC_OPTIONS=-DFO_X python3 scripts/bench/bench_gemm.py --order shuffle --out y.csv
     M      N      K                   config   torch    ours     x  signal  scat%   sig%  vs_torch
  2048   8192   8192 m256n128k64_w4x2_s3/row8   789.5   433.9  0.55   431.7   -0.5   -0.3  0.0e+00
=== exp_gemm rc=0 in 36s
"""


def test_reads_every_run_and_its_rows():
    df = read_log_tables(LOG)
    assert list(df["index"].unique()) == [0, 1]
    first, second = df[df["index"] == 0], df[df["index"] == 1]
    assert first["run"].iloc[0] == "bench_gemm order=(the script default)"
    assert second["run"].iloc[0] == "exp_gemm [-DFO_X] order=shuffle"
    assert first[["M", "N", "K"]].values.tolist() == [[1024, 4096, 1024], [1024, 4096, 4096]]
    assert first["signal_pct"].tolist() == [4.0, 1.4]
    assert first["scatter_pct"].tolist() == [1.6, -0.2]
    assert second["signal_pct"].tolist() == [-0.3]
    assert second["config"].iloc[0] == "m256n128k64_w4x2_s3/row8"


def test_a_log_without_tables_is_an_error():
    with pytest.raises(ValueError, match="no bench_gemm table"):
        read_log_tables("=== build (limit 120s): python3 -m fo_lib build\n")
