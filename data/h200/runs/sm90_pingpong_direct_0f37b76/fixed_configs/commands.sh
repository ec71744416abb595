# The fixed-config timings (the run lines of ../call2.sh), on one H200 at 2c7421b:
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=2c7421b
B="python3 scripts/bench/bench_gemm_sm90.py --graph --rounds 20"
$B --M 1536 --N 28672 --K 4096 --configs 128x176x64p/row8 128x176x64pd/row8 128x176x64/col4 128x256x64/row8+sk --out s1536x28672x4096.csv
$B --M 2048 --N 7168 --K 5120 --configs 128x176x64p/row8 128x176x64pd/row8 128x176x64c2/row8 --out s2048x7168x5120.csv
$B --M 1536 --N 3584 --K 18944 --configs 128x168x64/row8 128x168x64p/row8 128x168x64pd/row8 --out s1536x3584x18944.csv
$B --M 2600 --N 4096 --K 14336 --configs 128x168x64p/row8 128x168x64pd/row8 128x256x64/col4+sk --out s2600x4096x14336.csv
$B --M 4096 --N 7168 --K 4096 --configs 128x176x64c2/row8 128x176x64pd/row8 128x256x64/row8 --out s4096x7168x4096.csv
$B --M 1024 --N 28672 --K 4096 --configs 128x176x64/col4 128x176x64pd/col4 128x256x64c2/row8 --out s1024x28672x4096.csv
