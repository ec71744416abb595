#!/usr/bin/env bash
# Main job: regenerate every figure. Runs each notebook in notebooks/ headlessly with papermill
# (executed copies go to notebooks/output/, figures to figures/). Notebooks measure when the GPUs
# they need are present (mode=auto) and otherwise replay the recorded data in data/<gpu>/.
# Usage: ./run_all.sh [--quick] [--mode auto|measure|replay] [--data h200] [--only NN_name ...]
#                     [--output DIR] [--figures DIR] [--setup-only]
# --only runs the notebooks whose name starts with NN_name (repeatable); --output and --figures
# move the executed notebooks and the figures; --setup-only only creates or updates .venv.
# FO_NO_VENV=1 uses the python3 on PATH instead of ./.venv (machines without a package index).
set -euo pipefail
cd "$(dirname "$0")"
quick=false; mode=auto; data=h200; only=(); output=notebooks/output; figures=""; setup_only=false
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=true ;;
    --mode) mode="$2"; shift ;;
    --data) data="$2"; shift ;;
    --only) only+=("$2"); shift ;;
    --output) output="$2"; shift ;;
    --figures) figures="$2"; shift ;;
    --setup-only) setup_only=true ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "run_all.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
source scripts/setup_venv.sh
if $setup_only; then
  echo "run_all.sh: environment ready in ${FO_VENV:-.venv}"
  exit 0
fi

# The explicit, ordered list of notebooks (each writes its figures into figures/).
NOTEBOOKS=()
for nb in notebooks/[0-9][0-9]_*.ipynb; do
  [ -e "$nb" ] || continue
  keep=$(( ${#only[@]} == 0 ))
  for name in "${only[@]+"${only[@]}"}"; do
    case "$(basename "$nb")" in "$name"*) keep=1 ;; esac
  done
  if [ "$keep" = 1 ]; then NOTEBOOKS+=("$nb"); fi
done

if [ ${#NOTEBOOKS[@]} -eq 0 ]; then
  if [ ${#only[@]} -gt 0 ]; then
    echo "run_all.sh: no notebook matches --only ${only[*]}" >&2; exit 2
  fi
  echo "run_all.sh: environment ready ($(python -m fo_lib info | grep -E 'fo_lib|gpus' | tr -s ' ' | paste -sd ';'))."
  echo "run_all.sh: no notebooks exist yet, so there are no figures to regenerate."
  exit 0
fi
# Typed parameters: -p would inject "false" as a (truthy) string, so quick goes as YAML (a bool)
# and the strings go raw (-p would also turn a data set named 4090 into an int).
params=(-r mode "$mode" -y "quick: $quick" -r data_set "$data")
if [ -n "$figures" ]; then
  mkdir -p "$figures"; figures="$(cd "$figures" && pwd)"
  params+=(-r figures_dir "$figures")
fi
mkdir -p "$output" "${figures:-figures}"
for nb in "${NOTEBOOKS[@]}"; do
  name="$(basename "$nb")"
  echo "[run_all] $name (mode=$mode, quick=$quick)"
  if ! python -m papermill --no-progress-bar -k python3 "$nb" "$output/$name" "${params[@]}" \
        >"$output/${name%.ipynb}.log" 2>&1; then
    echo "run_all.sh: FAILED in notebook $name (log: $output/${name%.ipynb}.log)" >&2
    tail -n 30 "$output/${name%.ipynb}.log" >&2
    exit 1
  fi
done
echo "run_all.sh: figures written to ${figures:-$(pwd)/figures}/"
ls "${figures:-figures}"
