#!/usr/bin/env bash
# Call 13 on one H200 (two calls on the machine call 12 left warm, as typed there; the kernels cached by
# call 12's build), branch sm90-share-a at 4a0c397: the LLM benchmark in two processes, fresh tunings each.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1
FO_SM90_AUTOTUNE_FILE=$OUT/llm.autotune.json timeout 110 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --out $OUT/llm.csv > $OUT/llm.log 2>&1
echo rc=$?; grep "over 30" $OUT/llm.log
# (second call)
FO_SM90_AUTOTUNE_FILE=$OUT/llm_seed1.autotune.json timeout 80 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed 1 --out $OUT/llm_seed1.csv > $OUT/llm_seed1.log 2>&1
echo rc=$?; grep "over 30" $OUT/llm_seed1.log
