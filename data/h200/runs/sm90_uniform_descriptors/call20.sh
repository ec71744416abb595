#!/usr/bin/env bash
# Call 20 (fourteenth session): a cooperative warpgroup without rows skips its MMAs, stream-K runs of
# unequal length (sk_bounds), autotuning's one-wave handicap of single CTAs, the re-recorded tile
# table. The stream-K and autotuning GPU tests, compute-sanitizer of the stream-K tails (memcheck,
# synccheck, racecheck), the idle warpgroup's cost and the schedules on 5000 x 7168 x 8192
# (probe_idle_warpgroup.py), then the LLM benchmark in as many processes as the time allows.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py -k "stream_k or autotune or one_wave or tuning" > $OUT/tests_sk.log 2>&1
echo "tests stream-K rc=$? $((SECONDS - t0))s: $(tail -1 $OUT/tests_sk.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests_sk.log | head -10
for tool in memcheck synccheck racecheck; do
  ( time timeout 120 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 --stream-k ) > $OUT/san_$tool.log 2>&1
  echo "$tool rc=$? $((SECONDS - t0))s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|sanitize: ok|real' $OUT/san_$tool.log | tr '\n' ' ')" | tee -a $OUT/run.log
done
timeout 90 python3 scripts/profile/probe_idle_warpgroup.py --out $OUT/idle_wg.csv > $OUT/idle_wg.log 2>&1
echo "idle warpgroup rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log; cat $OUT/idle_wg.log
for seed in 0 1 2; do
  left=$(( ${FO_CALL_END:-575} - (SECONDS - t0) )); [ $left -lt 100 ] && break
  FO_SM90_AUTOTUNE_FILE=$OUT/llm_seed$seed.autotune.json timeout $left python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed $seed --out $OUT/llm_seed$seed.csv > $OUT/llm_seed$seed.log 2>&1
  echo "llm seed $seed rc=$? $((SECONDS - t0))s: $(grep 'over 30 shapes' $OUT/llm_seed$seed.log)" | tee -a $OUT/run.log
done
(cd $OUT && tar czf /tmp/logs.tgz * && find . -type f ! -name run.log -delete && mv /tmp/logs.tgz . && ls)
