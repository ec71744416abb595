#!/usr/bin/env bash
# Call 1 on one H200: build, tile table (pd rows), the pd configs' GPU tests, fixed-config timings
# of the 168/176-wide tiles on the shapes where they are picked, then the LLM benchmark.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1
export FO_SM90_AUTOTUNE_FILE=/tmp/fo_tune.json
FO_STEPS=build,sm90_tiles,tests FO_TEST_ARGS="-k pd -x" scripts/gpu_run.sh
export FO_SM90_TILES=$OUT/data/gemm_sm90_tiles.csv
mkdir -p $OUT/data/fixed
B="python3 scripts/bench/bench_gemm_sm90.py --graph --rounds 20"
run() { local name=$1; shift; echo "== $name"; $B "$@" --out $OUT/data/fixed/$name.csv 2>&1 | tail -12; }
run s1536x28672x4096 --M 1536 --N 28672 --K 4096 --configs 128x176x64p/row8 128x176x64pd/row8 128x176x64/col4 128x176x64c2/row8 128x256x64/row8+sk 128x240x64c2/row8
run s2048x7168x5120 --M 2048 --N 7168 --K 5120 --configs 128x176x64p/row8 128x176x64pd/row8 128x176x64c2/row8 128x176x64c2p/row8
run s1536x3584x18944 --M 1536 --N 3584 --K 18944 --configs 128x168x64/row8 128x168x64p/row8 128x168x64pd/row8 128x168x64pd/row1
run s1024x8192x14336 --M 1024 --N 8192 --K 14336 --configs 128x168x64p/col4 128x168x64pd/col4 128x256x64c2/row8
run s2600x4096x14336 --M 2600 --N 4096 --K 14336 --configs 128x168x64p/row8 128x168x64pd/row8 128x256x64/col4+sk
run s4096x7168x4096 --M 4096 --N 7168 --K 4096 --configs 128x176x64c2/row8 128x176x64pd/row8 128x256x64/row8
run s1024x28672x4096 --M 1024 --N 28672 --K 4096 --configs 128x176x64/col4 128x176x64pd/col4 128x256x64c2/row8
cp /dev/null $OUT/run_llm.log
timeout 200 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --out $OUT/data/gemm_sm90_llm.csv > $OUT/run_llm.log 2>&1
cp /tmp/fo_tune.json $OUT/data/llm.autotune.json 2>/dev/null
tail -45 $OUT/run_llm.log
cd $OUT && tar czf data.tgz data && echo tar ok
