#!/usr/bin/env bash
# Call 3 on one H200: the LLM benchmark with the table recorded in call 2 (now data/h200/), two
# processes (fresh tunings each), then the sm90 GPU tests and the sanitizer.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1
mkdir -p $OUT/data/rep2
python3 -m fo_lib build > /dev/null 2>&1
FO_SM90_AUTOTUNE_FILE=/tmp/tune1.json timeout 150 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --out $OUT/data/gemm_sm90_llm.csv > $OUT/run_llm.log 2>&1
FO_SM90_AUTOTUNE_FILE=/tmp/tune2.json timeout 150 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --seed 1 --out $OUT/data/rep2/gemm_sm90_llm.csv > $OUT/run_llm_seed1.log 2>&1
cp /tmp/tune1.json $OUT/data/llm.autotune.json; cp /tmp/tune2.json $OUT/data/rep2/llm.autotune.json
tail -3 $OUT/run_llm.log; tail -3 $OUT/run_llm_seed1.log
sed -i 's/^step tests 420/step tests 240/' scripts/gpu_run.sh
OUT=$OUT/gpu FO_STEPS=tests,sanitize_sm90 FO_TEST_ARGS="-k sm90" scripts/gpu_run.sh 2>&1 | tail -8
cd $OUT && tar czf all.tgz data gpu *.log && rm -rf data gpu && echo tar ok
