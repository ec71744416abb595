#!/usr/bin/env bash
# Call 10 on one H200: autotuning times 30 rounds (was 10; call 9). The LLM benchmark in two processes
# (fresh tunings each), then the GPU tests of autotuning (kernels unchanged since call 7).
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$?" | tee -a $OUT/run.log
FO_SM90_AUTOTUNE_FILE=$OUT/llm.autotune.json timeout 140 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --out $OUT/llm.csv > $OUT/llm.log 2>&1
echo "llm rc=$?: $(grep 'over 30 shapes' $OUT/llm.log)" | tee -a $OUT/run.log
FO_SM90_AUTOTUNE_FILE=$OUT/llm_seed1.autotune.json timeout 140 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed 1 --out $OUT/llm_seed1.csv > $OUT/llm_seed1.log 2>&1
echo "llm seed 1 rc=$?: $(grep 'over 30 shapes' $OUT/llm_seed1.log)" | tee -a $OUT/run.log
echo "bench took $((SECONDS - t0))s" | tee -a $OUT/run.log
(cd $OUT && cat llm_seed1.log >> llm.log && tar czf side.tgz *.json llm_seed1.csv && rm -f *.json llm_seed1.log llm_seed1.csv)
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_tuning_gpu.py tests/gpu/test_gemm_sm90_gpu.py \
  -k "tun or autotune" > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20
