#!/usr/bin/env bash
# Call 11 on one H200, the code of call 10: two more processes of the LLM benchmark (seeds 2 and 3,
# fresh tunings each), for the spread of the worst shape's ratio from process to process.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$?" | tee -a $OUT/run.log
for seed in 2 3; do
  FO_SM90_AUTOTUNE_FILE=$OUT/llm_seed$seed.autotune.json timeout 140 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed $seed --out $OUT/llm_seed$seed.csv > $OUT/llm_seed$seed.log 2>&1
  echo "llm seed $seed rc=$?: $(grep 'over 30 shapes' $OUT/llm_seed$seed.log)" | tee -a $OUT/run.log
done
(cd $OUT && cat llm_seed3.log >> llm_seed2.log && tar czf side.tgz *.json llm_seed3.csv && rm -f *.json llm_seed3.log llm_seed3.csv)
