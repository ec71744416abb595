#!/usr/bin/env bash
# Experiment (session 7): where the portable signal epilogue's cost comes from. Each line builds
# the kernels with one set of FO_NVRTC_OPTIONS and runs a short interleaved bench_gemm.
set -uo pipefail
OUT=${OUT:-/tmp/fo_out}; mkdir -p "$OUT/data/exp"
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache_exp
for spec in "base:" "top:-DFO_EXP_TOP" "norelease:-DFO_EXP_NORELEASE" "top_norelease:-DFO_EXP_TOP -DFO_EXP_NORELEASE" "plain_pieces:-DFO_EXP_PLAIN_PIECES"; do
  name=${spec%%:*}; opts=${spec#*:}
  echo "=== $name ($opts)"
  FO_NVRTC_OPTIONS="$opts" python3 scripts/bench_gemm.py --graph --rounds 20 --M 2048 8192 --N 8192 --K 1024 4096 8192 \
    --out "$OUT/data/exp/signal_cost_$name.csv" 2>&1 | grep -E "geomean|vs plain"
done
