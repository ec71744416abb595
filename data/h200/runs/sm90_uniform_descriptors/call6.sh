#!/usr/bin/env bash
# Call 6 on one H200, the final code: the sm90 GPU tests of every config whose kernels changed this
# session (single-CTA cooperative: uniform descriptors; ping-pong, clusters included: the hand-over at
# issue; the cooperative cluster configs' cubins are bit-identical to 9cf78eb's, NVRTC 12.9, CPU check).
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$?" | tee -a $OUT/run.log
timeout 330 python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py -k "not c2 or c2p" > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20
cd $OUT && tar czf all.tgz *.log && echo tar ok
