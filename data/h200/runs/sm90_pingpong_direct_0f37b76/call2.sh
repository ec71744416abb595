#!/usr/bin/env bash
# Call 2 on one H200 (call 1 hung in the tile table: 32 / 240 registers, more than the launch holds).
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1
export FO_SM90_AUTOTUNE_FILE=/tmp/fo_tune.json
sed -i 's/^step tests 420/step tests 200/; s/^step sm90_tiles 300/step sm90_tiles 150/' scripts/gpu_run.sh
FO_STEPS=build,tests,sm90_tiles FO_TEST_ARGS="-k pd -x" scripts/gpu_run.sh
export FO_SM90_TILES=$OUT/data/gemm_sm90_tiles.csv
mkdir -p $OUT/data/fixed
B="timeout 60 python3 scripts/bench/bench_gemm_sm90.py --graph --rounds 20"
run() { local name=$1; shift; echo "== $name"; $B "$@" --out $OUT/data/fixed/$name.csv 2>&1 | tail -9; }
run s1536x28672x4096 --M 1536 --N 28672 --K 4096 --configs 128x176x64p/row8 128x176x64pd/row8 128x176x64/col4 128x256x64/row8+sk
run s2048x7168x5120 --M 2048 --N 7168 --K 5120 --configs 128x176x64p/row8 128x176x64pd/row8 128x176x64c2/row8
run s1536x3584x18944 --M 1536 --N 3584 --K 18944 --configs 128x168x64/row8 128x168x64p/row8 128x168x64pd/row8
run s2600x4096x14336 --M 2600 --N 4096 --K 14336 --configs 128x168x64p/row8 128x168x64pd/row8 128x256x64/col4+sk
run s4096x7168x4096 --M 4096 --N 7168 --K 4096 --configs 128x176x64c2/row8 128x176x64pd/row8 128x256x64/row8
run s1024x28672x4096 --M 1024 --N 28672 --K 4096 --configs 128x176x64/col4 128x176x64pd/col4 128x256x64c2/row8
timeout 170 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --out $OUT/data/gemm_sm90_llm.csv > $OUT/run_llm.log 2>&1
cp /tmp/fo_tune.json $OUT/data/llm.autotune.json 2>/dev/null
tail -40 $OUT/run_llm.log
