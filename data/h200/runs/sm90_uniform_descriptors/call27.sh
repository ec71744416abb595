#!/usr/bin/env bash
# Call 27 (for the next session, main at 910dae2's kernels or later): what call 26 left unrun at the
# kernels with the walk's meeting (walk_bar) and the idle-warpgroup skip: compute-sanitizer memcheck,
# racecheck and synccheck of every sm_90a config (sanitize_kernels.py --sm90: whole waves, clusters
# with phantom units, M = 130 and 140 whose last tile row idles a warpgroup, the stream-K tails with
# runs of unequal length, each idle-row case under both plans), then every GPU test outside the sm90
# file (the engine runs these kernels). First the sm90 tests new since call 26: a late warp in walks
# with and without the meeting, in ping-pong turns (FO_SM90_*_LAG_NS; the hand-over as it is and with
# FO_SM90_HANDOVER_ALL=1), and the stream-K cases under both plans.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py -k "late_warp or walking or hands_its_turn or stream_k" > $OUT/tests_new.log 2>&1
echo "tests new rc=$? $((SECONDS - t0))s: $(tail -1 $OUT/tests_new.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests_new.log | head -10 | tee -a $OUT/run.log
for tool in memcheck racecheck synccheck; do
  ( time timeout 220 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 ) > $OUT/san_$tool.log 2>&1
  echo "$tool rc=$? $((SECONDS - t0))s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|sanitize: ok|real' $OUT/san_$tool.log | tr '\n' ' ')" | tee -a $OUT/run.log
done
left=$(( ${FO_CALL_END:-575} - (SECONDS - t0) )); echo "tests get ${left}s" | tee -a $OUT/run.log
timeout $left python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu --ignore=tests/gpu/test_gemm_sm90_gpu.py > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -10 | tee -a $OUT/run.log
