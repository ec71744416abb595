#!/usr/bin/env bash
# Call 22 (run from branch idle-warpgroup): which variant of the LLM benchmark's row of 5000 x 7168 x
# 8192 never finishes (calls 20 and 21). Each variant of that row (call 20's tuning picked
# 128x224x64/col4 over the model's 128x256x64/row8+sk) in its own process, 40 s at most, as the
# benchmark times it; then the hanging one with the idle-warpgroup skip compiled out
# (-DFO_SM90_IDLE_WG=0, its own kernel cache) and with the runs of equal length (cost 1).
export PYTHONPATH=$PWD FO_CACHE_DIR=/tmp/fo_cache FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 FO_SM90_AUTOTUNE=0
t0=$SECONDS
( time timeout 200 python3 -m fo_lib build ) > $OUT/run.log 2>&1; echo "build rc=$? $((SECONDS - t0))s" | tee -a $OUT/run.log
# First the whole row with the hang trap compiled in (-DFO_SM90_HANG_TRAP=1, its own kernel cache): a
# wait of 2 s prints where it waits (block, thread, barrier or flag) and fails the launch.
(export FO_CACHE_DIR=/tmp/fo_cache_trap FO_NVRTC_OPTIONS=-DFO_SM90_HANG_TRAP=1 FO_SM90_AUTOTUNE=1 FO_SM90_AUTOTUNE_FILE=/tmp/trap_at.json
 timeout 150 python3 -c "from fo_lib.experiments import gemm_llm; r = gemm_llm.measure_rows(30, 3, 0, [14], cluster=True)[0]; print('row done', r['config'], r['ours_ms'])" \
   > $OUT/trap_row.log 2>&1; echo "trap row rc=$? $((SECONDS - t0))s"; grep -m 20 -E "hang|row done|Error" $OUT/trap_row.log) | tee -a $OUT/run.log
v() { timeout 30 python3 data/h200/runs/sm90_uniform_descriptors/call22_variant.py "$@" 2>&1 | tail -1 | cut -c1-160
      echo "  rc=${PIPESTATUS[0]} $* $((SECONDS - t0))s"; }
for x in "128x224x64/row8+sk" "128x224x64/row8" "128x224x64/col4" "128x224x64/col4 signal" "128x256x64/row8+sk" "128x256x64/row8+sk signal" \
         "128x256x64/row8" "128x128x64/row8" "128x128x64/row8+sk" "128x224x64c2/row4" "128x256x64/row8+sk plain 1.0"; do
  [ $((SECONDS - t0)) -gt 480 ] && break
  v $x | tee -a $OUT/run.log
done
(export FO_CACHE_DIR=/tmp/fo_cache_noidle FO_NVRTC_OPTIONS=-DFO_SM90_IDLE_WG=0
 v 128x256x64/row8+sk; v 128x224x64/col4) | tee -a $OUT/run.log
