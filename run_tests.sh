#!/usr/bin/env bash
# Tests on any machine: CPU tests, NVRTC compile checks of every kernel for sm_80/86/89/90a,
# multi-process gloo tests and notebook replays. GPU tests run too when a GPU is present
# (they are marked `gpu` and skip themselves only when no CUDA GPU is visible).
# Usage: ./run_tests.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")"
source scripts/setup_venv.sh
export PYTHONHASHSEED=0
# Two pytest-xdist workers where no GPU is visible (the suite is CPU-bound on a 2-core CI machine),
# a test file on one worker (its module fixtures, such as every notebook's replay, run once); with a
# GPU one process, since GPU tests time the GPU. FO_TEST_WORKERS sets the count (0: no workers).
workers=2
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then workers=0; fi
python -m pytest -q -ra -n "${FO_TEST_WORKERS:-$workers}" --dist loadfile "$@"
