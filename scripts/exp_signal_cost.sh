#!/usr/bin/env bash
# Experiment (session 7): where the portable signal epilogue's cost comes from. Each line builds
# the kernels with one set of FO_NVRTC_OPTIONS (FO_EXP_* switches in fo_lib/cuda/gemm_mma.cuh at
# this commit) and runs a short interleaved bench_gemm on 6 shapes.
set -uo pipefail
OUT=${OUT:-/tmp/fo_out}; mkdir -p "$OUT/data/exp"
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache_exp
for spec in "top:" "top_warp0_no_stores:-DFO_EXP_WARP0_NO_STORES" "release_kt1:-DFO_EXP_RELEASE_KT1" "top_again:"; do
  name=${spec%%:*}; opts=${spec#*:}
  echo "=== $name ($opts)"
  FO_NVRTC_OPTIONS="$opts" python3 scripts/bench_gemm.py --graph --rounds 20 --M 2048 8192 --N 8192 --K 1024 4096 8192 \
    --out "$OUT/data/exp/signal_cost_$name.csv" 2>&1 | grep -E "geomean|vs plain"
done
