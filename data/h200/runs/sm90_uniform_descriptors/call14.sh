#!/usr/bin/env bash
# Call 14 on one H200, for the next session (the code of 4a0c397 or later): compute-sanitizer memcheck
# and racecheck of the sm_90a GEMM with the shared-A loads (sanitize_kernels.py --sm90: its edge bands
# pair tiles in one row), then the LLM benchmark in four processes (seeds 0-3, fresh tunings each):
# the spread of the worst shape decides issue 23's worst bar.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
( time timeout 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 ) > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|sanitize: ok|real' $OUT/memcheck.log | tr '\n' ' ')" | tee -a $OUT/run.log
for seed in 0 1 2 3; do
  FO_SM90_AUTOTUNE_FILE=$OUT/llm_seed$seed.autotune.json timeout 90 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed $seed --out $OUT/llm_seed$seed.csv > $OUT/llm_seed$seed.log 2>&1
  echo "llm seed $seed rc=$?: $(grep 'over 30 shapes' $OUT/llm_seed$seed.log)" | tee -a $OUT/run.log
done
(cd $OUT && tar czf llm.tgz llm_seed* && rm -f llm_seed*)
left=$(( 560 - (SECONDS - t0) )); echo "racecheck gets ${left}s" | tee -a $OUT/run.log
( time timeout $left compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 ) > $OUT/racecheck.log 2>&1
echo "racecheck rc=$?: $(grep -E 'RACECHECK SUMMARY|sanitize: ok|real' $OUT/racecheck.log | tr '\n' ' ')" | tee -a $OUT/run.log
