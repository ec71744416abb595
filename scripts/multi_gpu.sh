#!/usr/bin/env bash
# Multi-GPU job (NCCL, one process per GPU under torchrun). NVLink multicast stays off.
#   scripts/multi_gpu.sh [--dry-run] [--world W]
# Runs the correctness check of every primitive at world size W (default: all visible GPUs) and
# writes its log under ${OUT:-/tmp/fo_out}. --dry-run prints the commands without running them
# (works on any machine; CI-safe).
set -euo pipefail
cd "$(dirname "$0")/.."
dry=false; world=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=true ;;
    --world) world="$2"; shift ;;
    *) echo "multi_gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}
if [ -z "$world" ]; then
  world=$($py -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
fi
OUT=${OUT:-/tmp/fo_out}
cmds=(
  "$py -m torch.distributed.run --nproc_per_node $world -m fo_lib.distributed_check --device cuda --cases 24"
)
echo "world size $world; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
for c in "${cmds[@]}"; do
  if $dry; then echo "would run: $c"; continue; fi
  if [ "$world" -lt 2 ]; then echo "multi_gpu.sh: needs 2+ GPUs (found $world)" >&2; exit 3; fi
  mkdir -p "$OUT"
  echo "running: $c"
  $c 2>&1 | tee -a "$OUT/multi_gpu.log"
done
if $dry; then
  echo "not yet scripted: NCCL bandwidth curves and SM footprint per primitive, the NCCL speedup sweep"
fi
