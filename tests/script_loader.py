"""A repo script (``scripts/...``, not a package module) loaded as a module, for tests of its functions."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relpath: str):
    """The script at ``ROOT / relpath``, executed once more as a fresh module named after its file."""
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
