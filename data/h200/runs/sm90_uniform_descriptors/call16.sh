#!/usr/bin/env bash
# Call 16 (thirteenth session): the kernels without a stream-K tail compiled in, with a warp-uniform
# warpgroup index (every config; the +sk variants keep the old code). The LLM benchmark in three
# processes (seeds 0-2, fresh tunings), compute-sanitizer memcheck and racecheck of every sm_90a
# config, then the sm90 GPU tests of bf16 (and those without a dtype) in the time that is left.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
for seed in 0 1 2; do
  FO_SM90_AUTOTUNE_FILE=$OUT/llm_seed$seed.autotune.json timeout 90 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed $seed --out $OUT/llm_seed$seed.csv > $OUT/llm_seed$seed.log 2>&1
  echo "llm seed $seed rc=$? $((SECONDS - t0))s: $(grep 'over 30 shapes' $OUT/llm_seed$seed.log)" | tee -a $OUT/run.log
done
(cd $OUT && tar czf llm.tgz llm_seed* && rm -f llm_seed*)
for tool in memcheck racecheck; do
  ( time timeout 200 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 ) > $OUT/$tool.log 2>&1
  echo "$tool rc=$? $((SECONDS - t0))s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|sanitize: ok|real' $OUT/$tool.log | tr '\n' ' ')" | tee -a $OUT/run.log
done
left=$(( ${FO_CALL_END:-575} - (SECONDS - t0) )); echo "tests get ${left}s" | tee -a $OUT/run.log
timeout $left python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py -k "bf16 or not f16" > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -10
