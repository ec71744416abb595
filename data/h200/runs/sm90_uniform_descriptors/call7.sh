#!/usr/bin/env bash
# Call 7 on one H200, the final code of issue 23 (cecf6a0): the LLM benchmark in two processes (fresh
# tunings each), then the sm90 GPU tests of the ping-pong configs (the six single-CTA ping-pong kernels
# changed after 87a23bd; the cooperative kernels' cubins are bit-identical), then synccheck of the
# stream-K tails, under what time remains.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$?" | tee -a $OUT/run.log
FO_SM90_AUTOTUNE_FILE=$OUT/llm.autotune.json timeout 140 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --out $OUT/llm.csv > $OUT/llm.log 2>&1
echo "llm rc=$?: $(grep 'over 30 shapes' $OUT/llm.log)" | tee -a $OUT/run.log
FO_SM90_AUTOTUNE_FILE=$OUT/llm_seed1.autotune.json timeout 140 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed 1 --out $OUT/llm_seed1.csv > $OUT/llm_seed1.log 2>&1
echo "llm seed 1 rc=$?: $(grep 'over 30 shapes' $OUT/llm_seed1.log)" | tee -a $OUT/run.log
echo "bench took $((SECONDS - t0))s" | tee -a $OUT/run.log
(cd $OUT && cat llm_seed1.log >> llm.log && tar czf side.tgz *.json llm_seed1.csv && rm -f *.json llm_seed1.log llm_seed1.csv)
left=$(( ${FO_BUDGET_S:-560} - 40 - (SECONDS - t0) ))
echo "tests get ${left}s" | tee -a $OUT/run.log
timeout $left python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py \
  -k "64p or pd or c2p" > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20
( time timeout 35 compute-sanitizer --tool synccheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 --stream-k ) > $OUT/synccheck.log 2>&1
echo "synccheck rc=$?: $(grep -E 'ERROR SUMMARY|sanitize: ok|real' $OUT/synccheck.log | tr '\n' ' ')" | tee -a $OUT/run.log
