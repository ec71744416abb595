#!/usr/bin/env bash
# Tests on any machine: CPU tests, NVRTC compile checks of every kernel for sm_80/86/89/90a,
# multi-process gloo tests and notebook replays. GPU tests run too when a GPU is present
# (they are marked `gpu` and skip themselves only when no CUDA GPU is visible).
# Usage: ./run_tests.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")"
source scripts/setup_venv.sh
export PYTHONHASHSEED=0
python -m pytest -q -ra "$@"
