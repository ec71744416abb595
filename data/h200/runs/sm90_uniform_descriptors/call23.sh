#!/usr/bin/env bash
# Call 23 (for the next session, from main): the LLM benchmark at main's kernels (those of 7d3ca82)
# with the one-wave handicap of single CTAs and the re-recorded tile table, in as many processes as
# the time allows (seeds 0-3, fresh tunings), then the sm90 GPU tests of bf16 in the rest.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
for seed in 0 1 2 3; do
  left=$(( ${FO_CALL_END:-575} - (SECONDS - t0) )); [ $left -lt 130 ] && break
  FO_SM90_AUTOTUNE_FILE=$OUT/llm_seed$seed.autotune.json timeout $left python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed $seed --out $OUT/llm_seed$seed.csv > $OUT/llm_seed$seed.log 2>&1
  echo "llm seed $seed rc=$? $((SECONDS - t0))s: $(grep 'over 30 shapes' $OUT/llm_seed$seed.log)" | tee -a $OUT/run.log
done
left=$(( ${FO_CALL_END:-575} - (SECONDS - t0) )); echo "tests get ${left}s" | tee -a $OUT/run.log
timeout $left python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py -k "one_wave or autotune or bf16" > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
# At most 8 files come back: everything but run.log in one archive.
(cd $OUT && tar czf /tmp/out.tgz * && find . -type f ! -name run.log -delete && mv /tmp/out.tgz . && ls)
