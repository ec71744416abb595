"""GPU tests: every test here is marked ``gpu``; the module set skips only when no GPU is usable."""
import pytest


def _gpu_available() -> bool:
    try:
        import cupy
        import torch
        return torch.cuda.is_available() and cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no cupy / no driver means no GPU
        return False


HAVE_GPU = _gpu_available()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if not HAVE_GPU:
                item.add_marker(pytest.mark.skip(reason="no CUDA GPU (cupy + torch.cuda) on this machine"))
