#!/usr/bin/env bash
# Call 25 (main after merging idle-warpgroup with the walk's meeting, walk_bar): the benchmark row that
# never finished (5000 x 7168 x 8192, calls 20-24), the LLM benchmark (one-wave handicap, re-recorded
# table, the idle-warpgroup skip, runs of unequal length) in two processes, the stream-K, autotuning
# and cluster GPU tests of both dtypes, synccheck of the stream-K tails, a third LLM process if time
# is left. (A first try of this call lost its machine before it finished.)
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
FO_SM90_AUTOTUNE_FILE=/tmp/row14.json timeout 90 python3 -c "from fo_lib.experiments import gemm_llm; r = gemm_llm.measure_rows(30, 3, 0, [14], cluster=True)[0]; print({k: r[k] for k in ('config', 'ours_ms', 'cublas_ms', 'signal_ms', 'model_config', 'model_ms', 'alt_config', 'alt_ms', 'twin_ms')})" > $OUT/row14.log 2>&1
echo "row 14 rc=$? $((SECONDS - t0))s: $(tail -1 $OUT/row14.log)" | tee -a $OUT/run.log
llm() {
  FO_SM90_AUTOTUNE_FILE=$OUT/llm_seed$1.autotune.json timeout $2 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed $1 --out $OUT/llm_seed$1.csv > $OUT/llm_seed$1.log 2>&1
  echo "llm seed $1 rc=$? $((SECONDS - t0))s: $(grep 'over 30 shapes' $OUT/llm_seed$1.log)" | tee -a $OUT/run.log
}
llm 0 170; llm 1 170
timeout 120 python3 -m pytest -q -rs -p no:cacheprovider --timeout 60 tests/gpu/test_gemm_sm90_gpu.py -k "stream_k or autotune or one_wave or tuning or cluster or c2" > $OUT/tests_sm90.log 2>&1
echo "tests sm90 rc=$? $((SECONDS - t0))s: $(tail -1 $OUT/tests_sm90.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests_sm90.log | head -10 | tee -a $OUT/run.log
( time timeout 40 compute-sanitizer --tool synccheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 --stream-k ) > $OUT/san_synccheck.log 2>&1
echo "synccheck rc=$? $((SECONDS - t0))s: $(grep -E 'ERROR SUMMARY|sanitize: ok|real' $OUT/san_synccheck.log | tr '\n' ' ')" | tee -a $OUT/run.log
left=$(( ${FO_CALL_END:-560} - (SECONDS - t0) )); [ $left -ge 110 ] && llm 2 $left
# At most 8 files come back: everything but run.log in one archive.
(cd $OUT && tar czf /tmp/out.tgz * && find . -type f ! -name run.log -delete && mv /tmp/out.tgz . && ls)
