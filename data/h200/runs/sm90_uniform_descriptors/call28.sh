#!/usr/bin/env bash
# Call 28: racecheck of every sm_90a config (sanitize_kernels.py --sm90), which call 27 cut off at
# 220 s since the stream-K sweep runs each idle-row case under both plans; now with the whole call's
# time and a line per config, so a cut-off log says how far it got.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1
t0=$SECONDS
( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
left=$(( ${FO_CALL_END:-585} - (SECONDS - t0) ))
( time timeout $left compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 ) > $OUT/san_racecheck.log 2>&1
echo "racecheck rc=$? $((SECONDS - t0))s: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|sanitize: ok|real' $OUT/san_racecheck.log | tr '\n' ' ')" | tee -a $OUT/run.log
echo "configs done: $(grep -c '^sanitize: [^o]' $OUT/san_racecheck.log)" | tee -a $OUT/run.log
