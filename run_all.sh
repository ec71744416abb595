#!/usr/bin/env bash
# Main job: regenerate every figure. Runs each notebook in notebooks/ headlessly with papermill
# (executed copies go to notebooks/output/, figures to figures/). Notebooks measure when the GPUs
# they need are present (mode=auto) and otherwise replay the recorded data in data/<gpu>/.
# Usage: ./run_all.sh [--quick] [--mode auto|measure|replay] [--data h200]
# FO_NO_VENV=1 uses the python3 on PATH instead of ./.venv (machines without a package index).
set -euo pipefail
cd "$(dirname "$0")"
quick=false; mode=auto; data=h200
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=true ;;
    --mode) mode="$2"; shift ;;
    --data) data="$2"; shift ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "run_all.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
source scripts/setup_venv.sh

# The explicit, ordered list of notebooks (each writes its figures into figures/).
NOTEBOOKS=()
for nb in notebooks/[0-9][0-9]_*.ipynb; do [ -e "$nb" ] && NOTEBOOKS+=("$nb"); done

if [ ${#NOTEBOOKS[@]} -eq 0 ]; then
  echo "run_all.sh: environment ready ($(python -m fo_lib info | grep -E 'fo_lib|gpus' | tr -s ' ' | paste -sd ';'))."
  echo "run_all.sh: no notebooks exist yet, so there are no figures to regenerate."
  exit 0
fi
mkdir -p notebooks/output figures
for nb in "${NOTEBOOKS[@]}"; do
  name="$(basename "$nb")"
  echo "[run_all] $name (mode=$mode, quick=$quick)"
  if ! python -m papermill --no-progress-bar -k python3 "$nb" "notebooks/output/$name" \
        -p mode "$mode" -p quick "$quick" -p data_set "$data" >"notebooks/output/${name%.ipynb}.log" 2>&1; then
    echo "run_all.sh: FAILED in notebook $name (log: notebooks/output/${name%.ipynb}.log)" >&2
    tail -n 30 "notebooks/output/${name%.ipynb}.log" >&2
    exit 1
  fi
done
echo "run_all.sh: figures written to $(pwd)/figures/"
ls figures
