#!/usr/bin/env bash
# Call 4 on one H200: ping-pong hands the tensor cores over at issue (FO_SM90_ORDER_AT_ISSUE=1, the
# default) against at completion (=0): the ping-pong GPU tests and memcheck; then A B A B processes of
# bench_gemm_sm90.py on four shapes with fixed configs (128 x 256 cooperative as a control: the switch
# does not touch it), autotuning off; then the LLM benchmark (fresh tunings).
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
mkdir -p $OUT/data/ab
( time timeout 150 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$?" | tee -a $OUT/run.log
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py -k "64p or c2p" > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
( time timeout 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 --stream-k ) > $OUT/sanitize_memcheck.log 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|sanitize: ok' $OUT/sanitize_memcheck.log | tr '\n' ' ')" | tee -a $OUT/run.log
for pair in 0 1; do for opt in 0 1; do
  FO_SM90_AUTOTUNE=0 FO_NVRTC_OPTIONS=-DFO_SM90_ORDER_AT_ISSUE=$opt timeout 100 python3 scripts/bench/bench_gemm_sm90.py \
    --graph --rounds 15 --M 1536 2048 --N 7168 28672 --K 4096 \
    --configs 128x176x64pd/row8 128x168x64pd/row8 128x176x64p/row8 128x192x64c2p/row8 128x256x64/row8 \
    --out $OUT/data/ab/pair${pair}_issue${opt}.csv > $OUT/ab_pair${pair}_issue${opt}.log 2>&1
  echo "ab pair $pair issue=$opt rc=$?" | tee -a $OUT/run.log
done; done
python3 - <<'PY' | tee -a $OUT/run.log
import glob, os, pandas as pd
rows = []
for f in sorted(glob.glob(os.environ["OUT"] + "/data/ab/pair*_issue*.csv")):
    d = pd.read_csv(f); w = d.pivot_table(index=["M", "N", "K"], columns="variant", values="median_ms", aggfunc="first")
    r = w.div(w["torch"], axis=0)  # time / cuBLAS's time, same rounds
    r["opt"] = int(f[-5]); r["pair"] = f.split("pair")[1][0]; rows.append(r.reset_index())
a = pd.concat(rows); cols = [c for c in a.columns if c.startswith("cfg:") or c in ("sm90", "sm90_signal")]
m = a.groupby(["M", "N", "K", "opt"])[cols].median().unstack("opt")
print("time(at completion) / time(at issue), each relative to cuBLAS in its own rounds, median of 2 pairs:")
print(pd.DataFrame({c: m[(c, 0)] / m[(c, 1)] for c in cols}).round(4).to_string())
PY
FO_SM90_AUTOTUNE_FILE=/tmp/tune.json timeout 150 python3 scripts/bench/bench_gemm_sm90_llm.py --rounds 30 --out $OUT/data/gemm_sm90_llm.csv > $OUT/run_llm.log 2>&1
echo "llm rc=$?" | tee -a $OUT/run.log; tail -4 $OUT/run_llm.log; cp /tmp/tune.json $OUT/data/llm.autotune.json
cd $OUT && tar czf all.tgz data *.log && rm -rf data && echo tar ok
