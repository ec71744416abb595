#!/usr/bin/env bash
# Call 15 (thirteenth session): where the sm_90a GEMM loses to cuBLAS on the slowest LLM shapes --
# per unit of work, at the ends, or in the clock (probe_sm90_timeline.py, its default shapes).
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1
t0=$SECONDS
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
timeout 300 python3 scripts/profile/probe_sm90_timeline.py --out $OUT/timeline.csv > $OUT/timeline.log 2>&1
echo "timeline rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log; cat $OUT/timeline.log
