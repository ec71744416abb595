"""Print the pyproject extra that brings CuPy to this machine (read by scripts/setup_venv.sh):
``cuda12`` or ``cuda13`` after the CUDA major version of the NVIDIA driver, ``nvrtc`` where there is
no driver (CPU machines: CuPy's NVRTC binding and the library, enough for the compile checks).

The driver's version comes from nvidia-smi's header ("CUDA Version: 13.0": the newest CUDA the
driver runs, the number the wheels must not exceed), else from the driver library itself
(cuDriverGetVersion, where nvidia-smi is not installed). Standard library only: it runs before the
virtual environment exists. FO_CUDA_DRIVER_LIB names the driver library (default libcuda.so.1).
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys

EXTRAS = {12: "cuda12", 13: "cuda13"}
NO_DRIVER = "nvrtc"


def major_from_nvidia_smi() -> int | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"CUDA Version\s*:\s*(\d+)\.\d+", out)
    return int(m.group(1)) if m else None


def major_from_driver(lib) -> int | None:
    """CUDA major version from a loaded driver library (cuDriverGetVersion: 13000 for 13.0)."""
    version = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value <= 0:
        return None
    return version.value // 1000


def major_from_driver_library(name: str | None = None) -> int | None:
    try:
        lib = ctypes.CDLL(name or os.environ.get("FO_CUDA_DRIVER_LIB", "libcuda.so.1"))
    except OSError:
        return None
    return major_from_driver(lib)


def extra(major: int | None) -> str:
    if major is None:
        return NO_DRIVER
    if major < min(EXTRAS):
        print(f"cuda_extra: the driver runs CUDA {major}, older than any CuPy extra; installing "
              f"{NO_DRIVER} only (update the driver to use the GPU)", file=sys.stderr)
        return NO_DRIVER
    return EXTRAS.get(major, EXTRAS[max(EXTRAS)])  # a newer driver runs the newest wheels


def main() -> int:
    major = major_from_nvidia_smi()
    print(extra(major if major is not None else major_from_driver_library()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
