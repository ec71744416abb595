#!/usr/bin/env bash
# Call 18, for the next session (the kernels of a85f6c7 or later): what call 16 left untested -- the
# sm90 GPU tests of f16, every other GPU test (the engine runs these kernels too), synccheck of the
# stream-K tails -- then the one-wave tuning against the benchmark: probe_late_tuning.py times the
# tuning candidates of 1100 x 1792 x 5120 (shape 26) after the shapes before it, each timing between
# two clock readings, after no idle and after autotuning's own, then the benchmark's row of that shape
# (its pick against its cluster twin in the same rounds).
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
t0=$SECONDS
( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
timeout 240 python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_gemm_sm90_gpu.py -k "f16 and not bf16" > $OUT/tests_f16.log 2>&1
echo "tests f16 rc=$? $((SECONDS - t0))s: $(tail -1 $OUT/tests_f16.log)" | tee -a $OUT/run.log
( time timeout 60 compute-sanitizer --tool synccheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 --stream-k ) > $OUT/synccheck.log 2>&1
echo "synccheck rc=$?: $(grep -E 'ERROR SUMMARY|sanitize: ok|real' $OUT/synccheck.log | tr '\n' ' ')" | tee -a $OUT/run.log
timeout 120 python3 scripts/profile/probe_late_tuning.py --shape 26 --fresh --reps 3 3 --settle 0 -1 --bench > $OUT/probe_late.log 2>&1
echo "probe rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log; grep -E "pick" $OUT/probe_late.log | cut -c1-200
# The same three configs in bench_gemm_sm90.py's rounds (its own variants around them), autotuning off.
FO_SM90_AUTOTUNE=0 timeout 60 python3 scripts/bench/bench_gemm_sm90.py --graph --rounds 30 --M 1100 --N 1792 --K 5120 \
  --configs 128x128x64/col8 128x128x64c2/row8 128x128x64/row1 --out $OUT/one_wave.csv > $OUT/one_wave.log 2>&1
echo "one-wave bench rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log; tail -4 $OUT/one_wave.log
left=$(( ${FO_CALL_END:-575} - (SECONDS - t0) )); echo "tests get ${left}s" | tee -a $OUT/run.log
timeout $left python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu --ignore=tests/gpu/test_gemm_sm90_gpu.py > $OUT/tests.log 2>&1
echo "tests rc=$?: $(tail -1 $OUT/tests.log)" | tee -a $OUT/run.log
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -10
