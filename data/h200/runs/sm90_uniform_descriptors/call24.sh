#!/usr/bin/env bash
# Call 24 (branch idle-warpgroup): where each role of the CTA is when the benchmark's stopping variant
# (128x256x64/row8+sk: runs of unequal length, the idle-warpgroup skip; call 22) hangs. The hang trap
# (-DFO_SM90_HANG_TRAP=1, its own kernel cache) prints, once per warp that waits 1 s, its wait and
# the unit, schedule index, part and k-block of the producer, the store warps and both consumer
# warpgroups; it traps at 4 s.
export PYTHONPATH=$PWD FO_GIT_SHA=${FO_GIT_SHA:?} PYTHONUNBUFFERED=1 FO_SM90_AUTOTUNE=0
export FO_CACHE_DIR=/tmp/fo_cache_trap FO_NVRTC_OPTIONS=-DFO_SM90_HANG_TRAP=1
t0=$SECONDS
for epi in plain signal; do
  timeout 90 python3 data/h200/runs/sm90_uniform_descriptors/call22_variant.py 128x256x64/row8+sk $epi > $OUT/trap_$epi.log 2>&1
  echo "trap $epi rc=$? $((SECONDS - t0))s: $(grep -c 'fo_sm90 hang' $OUT/trap_$epi.log) warps told" | tee -a $OUT/run.log
  grep 'fo_sm90 hang' $OUT/trap_$epi.log | sort -t' ' -k4,4n -k6,6n | head -40 | tee -a $OUT/run.log
done
