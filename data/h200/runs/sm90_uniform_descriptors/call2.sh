#!/usr/bin/env bash
# Call 2 on one H200 (branch sm90-uniform-descriptors): compute-sanitizer memcheck and racecheck of the
# sm_90a stream-K tails, then the LLM benchmark (30 rounds, control variants on) in two processes,
# each with an empty autotune file of its own.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p $OUT/data/rep2
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$?" | tee -a $OUT/run.log
FO_SM90_AUTOTUNE_FILE=/tmp/tune1.json timeout 150 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --out $OUT/data/gemm_sm90_llm.csv > $OUT/run_llm.log 2>&1
echo "llm rc=$?" | tee -a $OUT/run.log
FO_SM90_AUTOTUNE_FILE=/tmp/tune2.json timeout 150 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed 1 --out $OUT/data/rep2/gemm_sm90_llm.csv > $OUT/run_llm_seed1.log 2>&1
echo "llm seed 1 rc=$?" | tee -a $OUT/run.log
cp /tmp/tune1.json $OUT/data/llm.autotune.json; cp /tmp/tune2.json $OUT/data/rep2/llm.autotune.json
tail -4 $OUT/run_llm.log; tail -4 $OUT/run_llm_seed1.log
for tool in memcheck racecheck; do
  ( time timeout 150 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 --stream-k ) > $OUT/sanitize_$tool.log 2>&1
  echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|sanitize: ok|real' $OUT/sanitize_$tool.log | tr '\n' ' ')" | tee -a $OUT/run.log
done
cd $OUT && tar czf all.tgz data *.log && rm -rf data && echo tar ok
