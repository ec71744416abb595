#!/usr/bin/env bash
# Call 8 on one H200, the final code of issue 23: every GPU test outside the sm90 GEMM's file (engine,
# portable GEMM, counting, post-ops, figures, tuning, launch; not run since the sm90 work began), then
# compute-sanitizer memcheck and racecheck of the portable kernels and memcheck of every sm_90a config.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$?" | tee -a $OUT/run.log
timeout 330 python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu --ignore=tests/gpu/test_gemm_sm90_gpu.py \
  > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20
for spec in "memcheck:" "racecheck:" "memcheck:--sm90"; do
  tool=${spec%%:*}; arg=${spec#*:}
  left=$(( 560 - (SECONDS - t0) )); (( left < 20 )) && { echo "no time left for $tool $arg" | tee -a $OUT/run.log; continue; }
  ( time timeout $left compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py $arg ) > $OUT/sanitize_$tool$arg.log 2>&1
  echo "$tool $arg rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|sanitize: ok|real' $OUT/sanitize_$tool$arg.log | tr '\n' ' ')" | tee -a $OUT/run.log
done
