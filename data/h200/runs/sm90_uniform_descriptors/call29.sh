#!/usr/bin/env bash
# Call 29: the stream-K GPU tests and the sanitizer sweep's stream-K part (no sanitizer: the kernels
# are call 27's) after the idle-tile cost moved behind sm90.idle_warpgroup_tile_cost.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1
t0=$SECONDS
( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py -k "stream_k" > $OUT/tests_sk.log 2>&1
echo "tests stream_k rc=$? $((SECONDS - t0))s: $(tail -1 $OUT/tests_sk.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests_sk.log | head -10 | tee -a $OUT/run.log
timeout 120 python3 scripts/profile/sanitize_kernels.py --sm90 --stream-k > $OUT/sweep_sk.log 2>&1
echo "sweep rc=$? $((SECONDS - t0))s: $(grep -c '^sanitize: [^o]' $OUT/sweep_sk.log) configs, $(tail -1 $OUT/sweep_sk.log)" | tee -a $OUT/run.log
