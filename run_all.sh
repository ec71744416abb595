#!/usr/bin/env bash
# Main job: regenerate every figure. Runs each notebook in notebooks/ headlessly with papermill
# (executed copies and logs go to notebooks/output/, figures to figures/), then prints a summary table.
# Notebooks measure when the GPUs they need are present (mode=auto), else replay data/<gpu>/. With
# several GPUs the single-GPU notebooks run side by side, one per GPU, then the multi-GPU ones on all
# (fo_lib/run_all_schedule.py); with one GPU or none, one after another.
# Usage: ./run_all.sh [--quick] [--mode auto|measure|replay] [--data h200] [--only NN_name ...]
#                     [--output DIR] [--figures DIR] [--setup-only]
# --only runs the notebooks whose name starts with NN_name (repeatable); --output and --figures
# move the executed notebooks and the figures; --setup-only only creates or updates .venv.
# FO_NO_VENV=1 uses the python3 on PATH instead of ./.venv (machines without a package index).
set -euo pipefail
cd "$(dirname "$0")"
quick=false; mode=auto; data=h200; only=(); output=notebooks/output; figures=""; setup_only=false
errors=()
# Prints $2, the value of option $1 ($3: words left); fails where it is missing, empty or another
# option, which would otherwise be an unbound variable or an --only that runs every notebook.
value_of() {
  if [ "$3" -lt 2 ] || [ -z "$2" ] || [ "${2#--}" != "$2" ]; then return 1; fi
  printf '%s' "$2"
}
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=true ;;
    --mode|--data|--only|--output|--figures)
      if v="$(value_of "$1" "${2-}" $#)"; then
        case "$1" in
          --mode) mode="$v" ;; --data) data="$v" ;; --only) only+=("$v") ;;
          --output) output="$v" ;; --figures) figures="$v" ;;
        esac
        shift
      else
        errors+=("$1 needs a value")
        if [ $# -ge 2 ] && [ -z "$2" ]; then shift; fi  # an empty value is consumed, an option is not
      fi ;;
    --setup-only) setup_only=true ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) errors+=("unknown argument $1") ;;
  esac
  shift
done

# Everything below is checked before the environment or any kernel starts, so a typo costs one line
# instead of a set-up and a notebook's log.
case "$mode" in auto|measure|replay) ;; *) errors+=("--mode must be one of auto, measure, replay, not '$mode'") ;; esac
if [[ ! "$data" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; then
  errors+=("--data must be the name of a folder in data/, not '$data'")
elif [ "$mode" != measure ] && [ ! -d "data/$data" ]; then  # auto and replay read it
  errors+=("no recorded data set data/$data (there are: $(cd data && ls -d */ 2>/dev/null | tr -d / | paste -sd ' '))")
fi
for dir in "$output" "$figures"; do
  if [ -n "$dir" ] && [ -e "$dir" ] && [ ! -d "$dir" ]; then errors+=("$dir is not a folder"); fi
done

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
for name in "${only[@]+"${only[@]}"}"; do
  matched=false
  for nb in "${NOTEBOOKS[@]+"${NOTEBOOKS[@]}"}"; do
    case "$(basename "$nb")" in "$name"*) matched=true ;; esac
  done
  $matched || errors+=("no notebook matches --only $name")
done

# papermill only logs a warning for a parameter a notebook does not declare (the notebook then runs
# with its own default), so every parameter injected below must be in each notebook's parameters cell.
declares() {  # notebook parameter: whether the cell tagged "parameters" assigns it
  awk -v p="$2" '
    /"tags": \[/ { intags = 1 }
    intags && /"parameters"/ { isparam = 1 }
    intags && /\]/ { intags = 0 }
    isparam && /"source": \[/ { insrc = 1; next }
    insrc { if ($0 ~ /^ *\]/) exit; if (index($0, "\"" p " = ") > 0) { found = 1; exit } }
    END { exit !found }' "$1"
}
injected=(mode quick data_set); [ -z "$figures" ] || injected+=(figures_dir)
for nb in "${NOTEBOOKS[@]+"${NOTEBOOKS[@]}"}"; do
  for param in "${injected[@]}"; do
    declares "$nb" "$param" || errors+=("$nb declares no parameter $param in its 'parameters' cell")
  done
done
if [ ${#errors[@]} -gt 0 ]; then
  printf 'run_all.sh: %s\n' "${errors[@]}" >&2
  exit 2
fi

source scripts/setup_venv.sh
if $setup_only; then
  echo "run_all.sh: environment ready in ${FO_VENV:-.venv}"
  exit 0
fi

if [ ${#NOTEBOOKS[@]} -eq 0 ]; then
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
echo "[run_all] ${#NOTEBOOKS[@]} notebooks (mode=$mode, quick=$quick)"
# Exits 1 naming every failed notebook with its log's tail, after the summary table.
python -m fo_lib.run_all_schedule --output "$output" --figures "${figures:-figures}" "${NOTEBOOKS[@]}" \
  -- "${params[@]}"
echo "run_all.sh: figures written to ${figures:-$(pwd)/figures}/"
ls "${figures:-figures}"
