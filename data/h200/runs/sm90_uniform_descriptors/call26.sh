#!/usr/bin/env bash
# Call 26 (main: the idle-warpgroup skip with the walk's meeting, the idle tile's cost 1 from calls 22
# and 25, so 5000 x 7168 x 8192 plans the split tail again): the LLM benchmark in three processes,
# the idle tile's cost and the shape's schedules side by side (probe_idle_warpgroup.py), memcheck and
# synccheck of the stream-K tails (runs of unequal length planned as for cost 0.6), then every sm90
# GPU test in the time left.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
for seed in 0 1 2; do
  FO_SM90_AUTOTUNE_FILE=$OUT/llm_seed$seed.autotune.json timeout 120 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed $seed --out $OUT/llm_seed$seed.csv > $OUT/llm_seed$seed.log 2>&1
  echo "llm seed $seed rc=$? $((SECONDS - t0))s: $(grep 'over 30 shapes' $OUT/llm_seed$seed.log)" | tee -a $OUT/run.log
done
timeout 120 python3 scripts/profile/probe_idle_warpgroup.py --out $OUT/idle_wg.csv > $OUT/idle_wg.log 2>&1
echo "idle warpgroup rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log; cat $OUT/idle_wg.log | tee -a $OUT/run.log
for tool in memcheck synccheck; do
  ( time timeout 40 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 --stream-k ) > $OUT/san_$tool.log 2>&1
  echo "$tool rc=$? $((SECONDS - t0))s: $(grep -E 'ERROR SUMMARY|sanitize: ok|real' $OUT/san_$tool.log | tr '\n' ' ')" | tee -a $OUT/run.log
done
left=$(( ${FO_CALL_END:-470} - (SECONDS - t0) )); echo "tests get ${left}s" | tee -a $OUT/run.log
timeout $left python3 -m pytest -q -rs -p no:cacheprovider --timeout 60 tests/gpu/test_gemm_sm90_gpu.py > $OUT/tests_sm90.log 2>&1
echo "tests sm90 rc=$? $((SECONDS - t0))s: $(tail -1 $OUT/tests_sm90.log | cut -c1-200)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests_sm90.log | head -10 | tee -a $OUT/run.log
# At most 8 files come back: everything but run.log in one archive.
(cd $OUT && tar czf /tmp/out.tgz * && find . -type f ! -name run.log -delete && mv /tmp/out.tgz . && ls)
