export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=ede4ee6 PYTHONUNBUFFERED=1
mkdir -p $OUT/data/odd
python3 -m fo_lib build > /dev/null 2>&1
B="python3 scripts/bench/bench_gemm_sm90.py --graph --rounds 20"
S="128x168x64/row1 128x168x64p/row1 128x168x64/row8 128x168x64p/row8 128x176x64/row8 128x176x64p/row8 128x176x64c2/row8 128x256x64/col4+sk 128x224x64/col4+sk"
$B --M 1536 --N 3584 --K 18944 --configs $S --out $OUT/data/odd/s1536x3584x18944.csv 2>&1 | tail -14
$B --M 2600 --N 4096 --K 14336 --configs $S 128x208x64/col4+sk --out $OUT/data/odd/s2600x4096x14336.csv 2>&1 | tail -15
$B --M 4096 --N 6144 --K 4096 --configs 128x168x64/row8 128x168x64p/row8 128x256x64/row8 128x256x64c2/row8 --out $OUT/data/odd/s4096x6144x4096.csv 2>&1 | tail -8
$B --M 1536 --N 28672 --K 4096 --configs 128x256x64/row8+sk 128x240x64c2/row8 128x240x64/row8 128x176x64/col4 128x168x64/row8 128x168x64p/row8 128x176x64p/row8 --out $OUT/data/odd/s1536x28672x4096.csv 2>&1 | tail -11
