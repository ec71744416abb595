#!/usr/bin/env bash
# Multi-GPU job (NCCL, one process per GPU under torchrun). NVLink multicast stays off.
#   scripts/multi_gpu.sh [--dry-run] [--world W] [--quick] [--steps check,host,bench,timeline]
# 1. check: the correctness check of every primitive (fo_lib.distributed_check) at world size W
#    (default: all visible GPUs), against a dense float64 reference, then again with the AllReduce
#    cases that the post-reorder reduces on a copy-engine communicator (--copy-engine);
# 2. host: where an eager call's host time goes, per wave group (scripts/profile/profile_host_path.py);
# 3. bench: NCCL curves, SM footprint and the speedup sweep (scripts/bench/bench_nccl.py, extra arguments
#    in $FO_BENCH_NCCL_ARGS) into
#    data/h200x<W>/ (or $FO_DATA_OUT), with provenance sidecars;
# 4. timeline: one measured call per shape with CUDA events per group (scripts/record/record_timeline.py).
# Logs go to ${OUT:-/tmp/fo_out}/multi_gpu.log. --dry-run prints the commands without running them
# (any machine; CI runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
dry=false; world=""; quick=""; steps="check,host,bench,timeline"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=true ;;
    --world) world="$2"; shift ;;
    --quick) quick="--quick" ;;
    --steps) steps="$2"; shift ;;
    *) echo "multi_gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
export NCCL_CGA_CLUSTER_SIZE=${NCCL_CGA_CLUSTER_SIZE:-1}  # see fo_lib/comm/torch_dist.py
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}
if [ -z "$world" ]; then
  world=$($py -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
fi
OUT=${OUT:-/tmp/fo_out}
data=${FO_DATA_OUT:-data/h200x$world}
run="$py -m torch.distributed.run --standalone --nproc_per_node $world"
cmds=()
# Each command has its own time limit, so that a hang in one cannot take the next one's time.
[[ ",$steps," == *",check,"* ]] && cmds+=("timeout 300 $run -m fo_lib.distributed_check --device cuda --cases 24")
# The same with the AllReduce cases reduced by the post-reorder on NCCL's copy engines.
[[ ",$steps," == *",check,"* ]] && cmds+=("timeout 300 $run -m fo_lib.distributed_check --device cuda --cases 24 --copy-engine")
[[ ",$steps," == *",host,"* ]] && cmds+=("timeout 150 $run scripts/profile/profile_host_path.py")
[[ ",$steps," == *",bench,"* ]] && cmds+=("timeout 1800 $run scripts/bench/bench_nccl.py --out $data $quick ${FO_BENCH_NCCL_ARGS:-}")
[[ ",$steps," == *",timeline,"* ]] && cmds+=("timeout 300 $run scripts/record/record_timeline.py --out $data")
echo "world size $world; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
for c in "${cmds[@]}"; do
  if $dry; then echo "would run: $c"; continue; fi
  if [ "$world" -lt 2 ]; then echo "multi_gpu.sh: needs 2+ GPUs (found $world)" >&2; exit 3; fi
  mkdir -p "$OUT"
  echo "running: $c" | tee -a "$OUT/multi_gpu.log"
  $c 2>&1 | tee -a "$OUT/multi_gpu.log"
done
