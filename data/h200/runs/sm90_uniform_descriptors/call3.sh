#!/usr/bin/env bash
# Call 3 on one H200: the pd configs' GPU tests and memcheck of the stream-K tails after the row
# pointers moved before the main loop; the LLM benchmark with the record's tunings (read, not retuned:
# the same picks, so the pd shapes' signal-vs-plain compares with the record's); ncu of ours against
# cuBLAS on the four slowest shapes of the record.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
D=data/h200/runs/sm90_uniform_descriptors
mkdir -p $OUT/data
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$?" | tee -a $OUT/run.log
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py -k "pd" > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
( time timeout 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 --stream-k ) > $OUT/sanitize_memcheck.log 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|sanitize: ok' $OUT/sanitize_memcheck.log | tr '\n' ' ')" | tee -a $OUT/run.log
cp $D/llm_f775bea.autotune.json /tmp/tune.json
FO_SM90_AUTOTUNE_FILE=/tmp/tune.json timeout 150 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --out $OUT/data/gemm_sm90_llm.csv > $OUT/run_llm.log 2>&1
echo "llm rc=$?" | tee -a $OUT/run.log; tail -4 $OUT/run_llm.log
timeout 200 python3 scripts/profile/profile_sm90_vs_cublas.py --shape 1536 28672 4096 128x176x64pd/col4 \
  --shape 2048 7168 5120 128x176x64pd/row8 --shape 5000 7168 8192 128x256x64/row8+sk \
  --shape 2048 4096 7168 128x256x64/row8 --out $OUT/data/sm90_ncu.csv > $OUT/ncu.log 2>&1
echo "ncu rc=$?" | tee -a $OUT/run.log; tail -30 $OUT/ncu.log
cd $OUT && tar czf all.tgz data *.log && rm -rf data && echo tar ok
