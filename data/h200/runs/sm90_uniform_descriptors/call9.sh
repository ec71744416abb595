#!/usr/bin/env bash
# Call 9 on one H200: how repeatable is one shape's tuning? Call 7's first process picked slower
# configs for 1536 x 28672 x 4096 and 2048 x 7168 x 5120 than every other process (its worst ratio
# 0.958). Each shape's candidates timed many times over, with autotuning's 10 rounds and with 30,
# fresh and late (after the LLM shapes before it, benchmarked as in the LLM benchmark).
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$?" | tee -a $OUT/run.log
timeout 120 python3 scripts/profile/probe_late_tuning.py --shape 3 --fresh --reps 3 3 3 3 3 3 --tune-rounds 10 30 > $OUT/probe3.log 2>&1
echo "probe 3 rc=$?" | tee -a $OUT/run.log
timeout 240 python3 scripts/profile/probe_late_tuning.py --shape 25 --fresh --reps 3 3 3 3 3 3 --tune-rounds 10 30 > $OUT/probe25.log 2>&1
echo "probe 25 rc=$?" | tee -a $OUT/run.log
grep -h -E "^(fresh|late)" $OUT/probe3.log $OUT/probe25.log | sed 's/ | before.*//'
