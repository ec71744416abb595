#!/usr/bin/env bash
# Call 12 on one H200: cluster pairs on one tile row share A by multicast (as pairs on one tile column
# share B). A B A B processes of bench_gemm_sm90.py on the one-wave 1100 x 1792 x 5120 with the
# 128 x 128 tiles in the rasters autotuning tries there (FO_SM90_SHARE_A=0: the old loads), autotuning
# off; then the cluster configs' GPU tests under what time remains.
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS; mkdir -p $OUT/ab
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
for pair in 0 1; do for opt in old new; do
  [[ $opt == old ]] && o=-DFO_SM90_SHARE_A=0 || o=
  FO_SM90_AUTOTUNE=0 FO_NVRTC_OPTIONS=$o timeout 90 python3 scripts/bench/bench_gemm_sm90.py --graph --rounds 20 \
    --M 1100 --N 1792 --K 5120 --configs 128x128x64c2/row1 128x128x64c2/row8 128x128x64c2/col8 128x128x64c2p/row1 \
    128x128x64/row1 128x128x64/col8 --out $OUT/ab/pair${pair}_$opt.csv > $OUT/ab/pair${pair}_$opt.log 2>&1
  echo "ab pair $pair $opt rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
done; done
python3 - <<'PY' | tee -a $OUT/run.log
import glob, os, pandas as pd
rows = []
for f in sorted(glob.glob(os.environ["OUT"] + "/ab/pair*_*.csv")):
    d = pd.read_csv(f); w = d.pivot_table(index=["M", "N", "K"], columns="variant", values="median_ms", aggfunc="first")
    r = w["torch"].values[0] / w.iloc[0]  # cuBLAS time / ours, same rounds
    r.name = os.path.basename(f)[:-4]; rows.append(r)
print("cuBLAS / ours per process (1100 x 1792 x 5120):"); print(pd.DataFrame(rows).round(3).T.to_string())
PY
left=$(( 500 - (SECONDS - t0) )); echo "tests get ${left}s" | tee -a $OUT/run.log
timeout $left python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py -k c2 -x > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -10
cd $OUT && tar czf ab.tgz ab && rm -rf ab
