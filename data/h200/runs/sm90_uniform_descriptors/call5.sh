#!/usr/bin/env bash
# Call 5 on one H200: the LLM benchmark at call 4's commit, a second process (seed 1, fresh tunings).
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p $OUT/data
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$?" | tee -a $OUT/run.log
FO_SM90_AUTOTUNE_FILE=/tmp/tune2.json timeout 150 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed 1 --out $OUT/data/gemm_sm90_llm.csv > $OUT/run_llm_seed1.log 2>&1
echo "llm seed 1 rc=$?" | tee -a $OUT/run.log; tail -4 $OUT/run_llm_seed1.log; cp /tmp/tune2.json $OUT/data/llm.autotune.json
cd $OUT && tar czf all.tgz data *.log && rm -rf data && echo tar ok
