#!/usr/bin/env bash
# Call 21: which launch hangs (call 20's LLM benchmark and probe_idle_warpgroup.py stopped at
# 5000 x 7168 x 8192): each step in its own process, 25 s at most.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1
t0=$SECONDS
step() { timeout 25 python3 data/h200/runs/sm90_uniform_descriptors/call21_step.py "$@" 2>&1 | tail -1 | cut -c1-200; echo "  rc=${PIPESTATUS[0]} $* $((SECONDS - t0))s"; }
step 128x256x64/col2+sk 5000 7168 8192 eager
step 128x256x64/row8 5000 7168 8192 eager
step 128x256x64/row8+sk 5000 7168 8192 eager
step 128x256x64/row8+sk 5000 7168 8192 graph
step 128x256x64c2/row8 5000 7168 8192 eager
step 128x256x64/row8 5120 7168 8192 eager
step 128x256x64/row8+sk 5120 7168 8192 eager
step 128x128x64/row8 5000 7168 1024 eager
step 128x176x64pd/row8+sk 5000 7168 8192 eager
