#!/usr/bin/env bash
# Call 19 (fourteenth session): why the one-wave tuning and the LLM benchmark rank 1100 x 1792 x 5120's
# configs differently (probe_one_wave_context.py: the same configs in the tuning's way, the
# benchmark's way, each with and without cuBLAS among them, and after 1.5 s of heat), then the tile
# table re-recorded with the current kernels (record_sm90_tiles.py) and one LLM benchmark process on it.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
timeout 150 python3 scripts/profile/probe_one_wave_context.py --shape 26 --cycles 3 > $OUT/context.log 2>&1
echo "context probe rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log; cut -c1-230 $OUT/context.log
mkdir -p $OUT/data
timeout 200 python3 scripts/bench/record_sm90_tiles.py --out $OUT/data/gemm_sm90_tiles.csv > $OUT/tiles.log 2>&1
echo "tiles rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log; tail -3 $OUT/tiles.log
left=$(( ${FO_CALL_END:-575} - (SECONDS - t0) )); echo "llm gets ${left}s" | tee -a $OUT/run.log
FO_SM90_TILES=$OUT/data/gemm_sm90_tiles.csv FO_SM90_AUTOTUNE_FILE=$OUT/llm_seed0.autotune.json timeout $left python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed 0 --out $OUT/llm_seed0.csv > $OUT/llm_seed0.log 2>&1
echo "llm seed 0 rc=$? $((SECONDS - t0))s: $(grep 'over 30 shapes' $OUT/llm_seed0.log)" | tee -a $OUT/run.log
