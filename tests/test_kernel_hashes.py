"""scripts/tooling/kernel_hashes.py: one line per kernel, the sha256 of the cubin the library itself
compiles for that label; a tree without fo_lib is refused."""
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from fo_lib import jit
from fo_lib import kernel_catalog as catalog

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "tooling" / "kernel_hashes.py"
LABEL = "gemm_sm90 128x128x64p bf16 plain"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=""))


def test_one_line_per_kernel_with_the_cubins_hash(nvrtc):
    out = _run("--root", str(ROOT), "--only", LABEL)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and re.fullmatch(rf"{re.escape(LABEL)}\t[0-9a-f]{{64}}", lines[0])
    src = dict(catalog.compile_check_sources("sm_90a"))[LABEL]
    assert lines[0].split("\t")[1] == hashlib.sha256(jit.compile_cubin(src, "sm_90a")).hexdigest()


def test_a_tree_without_fo_lib_is_refused(tmp_path):
    out = _run("--root", str(tmp_path))
    assert out.returncode == 2 and f"{tmp_path} has no fo_lib package" in out.stderr
