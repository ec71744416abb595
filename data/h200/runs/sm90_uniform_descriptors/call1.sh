#!/usr/bin/env bash
# Call 1 on one H200 (branch sm90-uniform-descriptors; .baseline = `git archive main`): the build, the
# SASS counts under the machine's NVRTC, the stream-K GPU tests and plain bf16 of every single-CTA
# config, then the A/B of the two trees' kernels on the LLM shapes (same tile table, autotuning off).
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p $OUT/data
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv | tee $OUT/run.log
( time timeout 150 python3 -m fo_lib build ) >> $OUT/run.log 2>&1; echo "build rc=$?" | tee -a $OUT/run.log
PATH=$PATH:/usr/local/cuda/bin timeout 200 python3 scripts/profile/sass_report.py --sm90 > $OUT/sass_sm90_nvrtc13.log 2>&1 &
sass=$!
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py \
  -k "stream_k or odd_width or (test_gemm_plain and bf16 and not c2)" > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
wait $sass; echo "sass rc=$?" | tee -a $OUT/run.log; tail -40 $OUT/sass_sm90_nvrtc13.log
timeout 300 python3 scripts/bench/ab_sm90_llm.py --a .baseline --b . --pairs 2 --rounds 20 --out-dir $OUT/data/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" | tee -a $OUT/run.log; tail -45 $OUT/ab.log
cd $OUT && tar czf all.tgz data *.log && rm -rf data && echo tar ok
