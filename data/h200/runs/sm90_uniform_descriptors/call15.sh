#!/usr/bin/env bash
# Call 15 (thirteenth session). (1) Where the sm_90a GEMM loses to cuBLAS on the slowest LLM shapes:
# per unit of work, at the ends, or in the clock (probe_sm90_timeline.py). (2) An A/B in old new old
# new processes (bench_gemm_sm90.py --graph, autotuning off, each config over cuBLAS in its own rounds)
# of two experiment switches in the working tree's gemm_sm90.cuh: FO_EXP_UNIFORM_C (the consumer
# warpgroup index through a shuffle, so ptxas may see it warp-uniform) and FO_EXP_NO_SK (no stream-K
# tail compiled in): on the CPU together they take the ping-pong k-loop from 104 instructions with 32
# R2URs to 71 with none, without spills.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1
t0=$SECONDS; mkdir -p $OUT/ab
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
timeout 150 python3 scripts/profile/probe_sm90_timeline.py --rounds 15 --hold 0.5 --out $OUT/timeline.csv \
  --shapes 5000,7168,8192,128x256x64/row8+sk 2048,7168,5120,128x176x64pd/row8 1536,28672,4096,128x176x64pd/col4 \
  2048,4096,7168,128x256x64/row8 12288,7168,4096,128x176x64c2p/row8 > $OUT/timeline.log 2>&1
echo "timeline rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
shape_args() {
  case $1 in
    a) echo "--M 2048 --N 7168 --K 5120 --configs 128x176x64pd/row8 128x168x64pd/row8 128x176x64p/row8 128x176x64c2p/row8 128x176x64/row8 128x256x64/row8";;
    b) echo "--M 1536 --N 28672 --K 4096 --configs 128x176x64pd/col4 128x168x64pd/col4 128x176x64p/col4 128x176x64c2p/col4 128x240x64/row8";;
    c) echo "--M 2048 --N 4096 --K 7168 --configs 128x256x64/row8 128x256x64c2/row4 128x128x64p/row8 128x192x64c2p/row8";;
  esac
}
for pair in 0 1; do for opt in old new; do for s in a b c; do
  [[ $opt == new ]] && o="-DFO_EXP_UNIFORM_C=1 -DFO_EXP_NO_SK=1" || o=
  FO_SM90_AUTOTUNE=0 FO_NVRTC_OPTIONS=$o timeout 100 python3 scripts/bench/bench_gemm_sm90.py --graph --rounds 20 \
    $(shape_args $s) --out $OUT/ab/pair${pair}_${opt}_$s.csv > $OUT/ab/pair${pair}_${opt}_$s.log 2>&1
  echo "ab pair $pair $opt $s rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
done; done; done
python3 - <<'PY' | tee -a $OUT/run.log
import glob, os, pandas as pd
rows = []
for f in sorted(glob.glob(os.environ["OUT"] + "/ab/pair*_*.csv")):
    d = pd.read_csv(f); w = d.pivot_table(index=["M", "N", "K"], columns="variant", values="median_ms", aggfunc="first")
    for (M, N, K), r in w.iterrows():
        name = os.path.basename(f)[:-4]
        for v, ms in r.items():
            if v != "torch" and ms == ms:
                rows.append(dict(shape=f"{M}x{N}x{K}", variant=v, run=name.split("_")[0] + "_" + name.split("_")[1], ratio=r["torch"] / ms))
t = pd.DataFrame(rows).pivot_table(index=["shape", "variant"], columns="run", values="ratio")
t["new/old"] = (t[["pair0_new", "pair1_new"]].mean(axis=1) / t[["pair0_old", "pair1_old"]].mean(axis=1))
print("cuBLAS / ours per process:"); print(t.round(4).to_string())
PY
cat $OUT/timeline.log
cd $OUT && tar czf ab.tgz ab && rm -rf ab
