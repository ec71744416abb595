#!/usr/bin/env bash
# Create or update the project's virtual environment in ./.venv (sourced by run_tests.sh and run_all.sh).
# Re-installs only when pyproject.toml changed since the last successful install.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${FO_NO_VENV:-0}" = "1" ]; then
  # Machines without a package index (the GPU machine): use the python3 on PATH as it is, with
  # the repo importable; papermill etc. must already be there (e.g. from carried wheels).
  export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
  python() { python3 "$@"; }
  export -f python 2>/dev/null || true
  return 0 2>/dev/null || exit 0
fi
venv="${FO_VENV:-$root/.venv}"
py="${PYTHON:-python3}"
# CuPy after the driver: cuda12 / cuda13 on GPU machines, nvrtc (compile checks only) elsewhere.
extras="${FO_EXTRAS:-test,$("$py" "$root/scripts/tooling/cuda_extra.py"),notebooks}"
if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating virtual environment $venv"
  "$py" -m venv "$venv"
fi
stamp="$venv/.fo_lib-installed"
want="$(sha256sum "$root/pyproject.toml" | cut -c1-16) $extras"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing fo_lib[$extras] into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # torch first, pinned: on CPU machines 2.13.0 is the CPU build on local disk; the project's own
  # requirement is a range so that a GPU machine keeps its CUDA build.
  "$venv/bin/python" -c "import torch" 2>/dev/null || "$venv/bin/python" -m pip install -q "torch==2.13.0"
  "$venv/bin/python" -m pip install -q -e "$root[$extras]"
  # No kernel spec of our own: the notebooks name "python3", which a JupyterLab started from this
  # venv runs with the venv's own python (ipykernel's built-in spec), as papermill does in run_all.sh.
  echo "$want" > "$stamp"
fi
# JupyterLab started from this venv saves notebooks without the kernel's language_info (its exact
# Python version), so a notebook opened and saved unchanged is the committed one byte for byte. (The
# server reads only extension switches from jupyter_server_config.d, so this is the main file.)
hook="$venv/etc/jupyter/jupyter_server_config.json"
if [ ! -f "$hook" ]; then
  mkdir -p "$(dirname "$hook")"
  printf '{"ContentsManager": {"pre_save_hook": "fo_lib._jupyter.drop_kernel_metadata"}}\n' > "$hook"
fi
export PATH="$venv/bin:$PATH"
