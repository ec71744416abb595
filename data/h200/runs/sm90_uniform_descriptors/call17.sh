#!/usr/bin/env bash
# Call 17 (thirteenth session, right after call 16 on the same machine): racecheck of every sm_90a
# config, synccheck of the stream-K tails, every other GPU test (the engine runs the sm90 kernels
# too), and the sm90 GPU tests call 16 did not reach (those of its log's last lines are rerun).
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
[[ -d /tmp/fo_cache ]] || { ( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log; }
( time timeout 200 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 ) > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? $((SECONDS - t0))s: $(grep -E 'RACECHECK SUMMARY|sanitize: ok|real' $OUT/racecheck.log | tr '\n' ' ')" | tee -a $OUT/run.log
( time timeout 60 compute-sanitizer --tool synccheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 --stream-k ) > $OUT/synccheck.log 2>&1
echo "synccheck rc=$?: $(grep -E 'ERROR SUMMARY|sanitize: ok|real' $OUT/synccheck.log | tr '\n' ' ')" | tee -a $OUT/run.log
left=$(( ${FO_CALL_END:-575} - (SECONDS - t0) )); echo "tests get ${left}s" | tee -a $OUT/run.log
timeout $left python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu ${FO_TESTS_ARGS:---ignore=tests/gpu/test_gemm_sm90_gpu.py} > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -10
