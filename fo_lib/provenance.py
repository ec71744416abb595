"""Measured data with a provenance sidecar: ``data/<gpu>/<name>.csv`` + ``<name>.meta.json``."""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"


def _version(module: str) -> str:
    try:
        mod = __import__(module)
        return getattr(mod, "__version__", "installed")
    except Exception as exc:  # noqa: BLE001 - report any import failure as text
        return f"not available ({type(exc).__name__})"


def environment_info() -> dict:
    """Versions and devices, for ``info`` and for provenance sidecars."""
    from . import __version__
    info = {"fo_lib": __version__, "python": platform.python_version(), "platform": platform.platform(),
            "numpy": _version("numpy"), "torch": _version("torch"), "cupy": _version("cupy")}
    try:
        import torch
        info["torch_cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            info["gpus"] = [
                {"name": p.name, "sm_count": p.multi_processor_count,
                 "capability": f"{p.major}.{p.minor}", "memory_gib": round(p.total_memory / 2**30, 1)}
                for p in (torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count()))]
    except Exception:  # noqa: BLE001
        pass
    try:
        import cupy
        info["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        info["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    except Exception:  # noqa: BLE001
        pass
    try:
        from . import jit
        info["nvrtc"] = ".".join(map(str, jit.nvrtc_version()))
    except Exception:  # noqa: BLE001
        pass
    info.setdefault("gpus", [])
    return info


def git_sha() -> str:
    """HEAD of this checkout (``+dirty`` when tracked files differ from it), or ``FO_GIT_SHA`` (the GPU
    machine receives a copy of the working tree, whose .git, if any, may be an older one)."""
    import os
    if os.environ.get("FO_GIT_SHA"):
        return os.environ["FO_GIT_SHA"]
    try:
        def git(*args):
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                                  check=True).stdout.strip()
        sha = git("rev-parse", "--short=12", "HEAD")
        return sha + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def gpu_tag(name: str | None = None) -> str:
    """Short folder name for a GPU: 'NVIDIA H200' -> 'h200'."""
    if name is None:
        import torch
        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return name.lower().replace("nvidia", "").strip().split()[0].replace("-", "")


def provenance(*, world_size: int = 1, link: str = "none", command: str | None = None, **extra) -> dict:
    info = environment_info()
    gpu = info["gpus"][0] if info.get("gpus") else {}
    return {
        "gpu": gpu.get("name", "none"), "sm_count": gpu.get("sm_count"),
        "cuda_driver": info.get("cuda_driver"), "cuda_runtime": info.get("cuda_runtime"),
        "nccl": info.get("nccl"), "torch": info.get("torch"), "cupy": info.get("cupy"),
        "nvrtc": info.get("nvrtc"), "python": info.get("python"), "git_sha": git_sha(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "world_size": world_size, "link": link,
        "command": command if command is not None else " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        # Extra NVRTC options (kernel experiments, see fo_lib.jit.compiler) change what was measured.
        **({"fo_nvrtc_options": os.environ["FO_NVRTC_OPTIONS"]} if os.environ.get("FO_NVRTC_OPTIONS") else {}),
        **extra,
    }


def write_result(df, path: str | Path, **meta) -> Path:
    """Write ``df`` as CSV at ``path`` and its sidecar ``<stem>.meta.json``; return the CSV path."""
    path = Path(path)
    from ._util import atomic_path, atomic_write
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:  # an interrupted run leaves the old record, not a truncated one
        df.to_csv(tmp, index=False)
    atomic_write(path.with_suffix(".meta.json"), (json.dumps(provenance(**meta), indent=1) + "\n").encode())
    return path
