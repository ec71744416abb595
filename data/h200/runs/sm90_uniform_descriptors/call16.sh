#!/usr/bin/env bash
# Call 16 (thirteenth session): the kernels without a stream-K tail compiled in, with a warp-uniform
# warpgroup index (every config; the +sk variants keep the old code). The LLM benchmark in three
# processes (seeds 0-2, fresh tunings), compute-sanitizer memcheck of every sm_90a config, then the
# sm90 GPU tests in the time that is left (call 17 runs racecheck and the rest).
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
for seed in 0 1 2; do
  FO_SM90_AUTOTUNE_FILE=$OUT/llm_seed$seed.autotune.json timeout 90 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed $seed --out $OUT/llm_seed$seed.csv > $OUT/llm_seed$seed.log 2>&1
  echo "llm seed $seed rc=$? $((SECONDS - t0))s: $(grep 'over 30 shapes' $OUT/llm_seed$seed.log)" | tee -a $OUT/run.log
done
(cd $OUT && tar czf llm.tgz llm_seed* && rm -f llm_seed*)
( time timeout 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 ) > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|sanitize: ok|real' $OUT/memcheck.log | tr '\n' ' ')" | tee -a $OUT/run.log
left=$(( 520 - (SECONDS - t0) )); echo "tests get ${left}s" | tee -a $OUT/run.log
timeout $left python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -10
