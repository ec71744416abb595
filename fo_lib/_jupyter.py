"""The save hook of the JupyterLab started from the project's venv (scripts/setup_venv.sh registers
it in ``<venv>/etc/jupyter/jupyter_server_config.json``)."""
from __future__ import annotations

# JupyterLab fills this in from the kernel as soon as a notebook opens, with the interpreter's exact
# version, so a notebook opened and saved unchanged would otherwise differ from the committed one.
KERNEL_FILLED_METADATA = ("language_info",)


def drop_kernel_metadata(model: dict, **_) -> None:
    """Pre-save hook: leave out of a saved notebook what the running kernel, not the user, wrote."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    metadata = model["content"].get("metadata", {})
    for key in KERNEL_FILLED_METADATA:
        metadata.pop(key, None)
