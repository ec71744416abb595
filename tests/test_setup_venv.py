"""The environment set-up: scripts/tooling/cuda_extra.py picks CuPy's extra from the driver's CUDA version,
and scripts/setup_venv.sh installs that extra and keeps everything it writes inside the venv."""
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
cuda_extra = load_script("scripts/tooling/cuda_extra.py")

SMI_HEADER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: {cuda}     |
+-----------------------------------------+------------------------+----------------------+
"""


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fake_nvidia_smi(bin_dir: Path, cuda: str) -> Path:
    # printf is a shell builtin: the tests put nothing else on PATH.
    return executable(bin_dir / "nvidia-smi", f"#!/bin/sh\nprintf '%s' '{SMI_HEADER.format(cuda=cuda)}'\n")


def run_cuda_extra(path_dirs, tmp_path):
    # Only the given directories on PATH, and no driver library: the answer depends on the fake alone.
    env = dict(os.environ, PATH=os.pathsep.join(map(str, path_dirs)), FO_CUDA_DRIVER_LIB=str(tmp_path / "no-libcuda.so"))
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "tooling" / "cuda_extra.py")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


@pytest.mark.parametrize("cuda, want", [("12.4", "cuda12"), ("13.0", "cuda13"), ("14.1", "cuda13"), ("11.8", "nvrtc")])
def test_cuda_extra_follows_nvidia_smis_cuda_version(cuda, want, tmp_path):
    fake_nvidia_smi(tmp_path / "bin", cuda)
    assert run_cuda_extra([tmp_path / "bin"], tmp_path) == want


def test_cuda_extra_without_nvidia_smi_or_driver_is_the_cpu_set(tmp_path):
    (tmp_path / "empty").mkdir()
    assert run_cuda_extra([tmp_path / "empty"], tmp_path) == "nvrtc"


def test_cuda_extra_ignores_an_nvidia_smi_that_fails(tmp_path):
    executable(tmp_path / "bin" / "nvidia-smi", "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert run_cuda_extra([tmp_path / "bin"], tmp_path) == "nvrtc"


class FakeDriver:
    """cuDriverGetVersion as the driver library exports it: writes through the pointer, returns a CUresult."""

    def __init__(self, version, result=0):
        self.version, self.result = version, result

    def cuDriverGetVersion(self, ref):
        ref._obj.value = self.version  # ctypes.byref(c_int) keeps the c_int in _obj
        return self.result


def test_the_driver_librarys_version_gives_the_major():
    assert cuda_extra.major_from_driver(FakeDriver(13000)) == 13
    assert cuda_extra.major_from_driver(FakeDriver(12080)) == 12
    assert cuda_extra.major_from_driver(FakeDriver(12080, result=3)) is None  # CUDA_ERROR_NOT_INITIALIZED
    assert cuda_extra.major_from_driver_library(str(Path("/nonexistent/libcuda.so.1"))) is None


def fake_venv(tmp_path) -> tuple[Path, Path]:
    """A venv whose python logs every call, installs nothing, and runs `-m ipykernel` for real (with
    this interpreter), so that the kernel spec lands wherever setup_venv.sh asks."""
    venv, log = tmp_path / "venv", tmp_path / "python.log"
    executable(venv / "bin" / "python", f"""#!/bin/sh
echo "$*" >> "{log}"
if [ "$1" = "-m" ] && [ "$2" = "ipykernel" ]; then exec "{sys.executable}" "$@"; fi
exit 0
""")
    return venv, log


@pytest.mark.timeout(120)
def test_setup_writes_nothing_in_home_and_installs_the_drivers_extra(tmp_path):
    import ipykernel  # noqa: F401  (the notebooks extra: the set-up runs it for real)
    venv, log = fake_venv(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    fake_nvidia_smi(tmp_path / "bin", "13.0")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "FO_", "IPYTHON", "XDG_"))}
    env.update(HOME=str(home), FO_VENV=str(venv), PYTHON=sys.executable,
               PATH=os.pathsep.join([str(tmp_path / "bin"), "/usr/bin", "/bin"]))
    setup = f"source '{ROOT / 'scripts' / 'setup_venv.sh'}'"
    for _ in range(2):  # the second run finds the stamp and installs nothing
        res = subprocess.run(["bash", "-c", setup], env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
    calls = log.read_text().splitlines()
    installs = [c for c in calls if c.startswith("-m pip install -q -e")]
    assert installs == [f"-m pip install -q -e {ROOT}[test,cuda13,notebooks]"]
    assert not (venv / "share" / "jupyter" / "kernels").exists()  # the notebooks' "python3" is the venv's
    # JupyterLab's save hook (tests/test_notebook_sources.py checks what it keeps out of a notebook).
    hook = json.loads((venv / "etc" / "jupyter" / "jupyter_server_config.json").read_text())
    assert hook == {"ContentsManager": {"pre_save_hook": "fo_lib._jupyter.drop_kernel_metadata"}}
    assert not (home / ".local" / "share" / "jupyter").exists()
    assert [p for p in home.rglob("*") if p.is_file()] == []  # (IPython's import leaves an empty ~/.ipython)
    assert (venv / ".fo_lib-installed").read_text().split()[1] == "test,cuda13,notebooks"


@pytest.mark.timeout(120)
def test_run_all_setup_only_sets_up_and_runs_no_notebook(tmp_path):
    import ipykernel  # noqa: F401  (the notebooks extra: the set-up runs it for real)
    venv, log = fake_venv(tmp_path)
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "FO_", "IPYTHON", "XDG_"))}
    env.update(HOME=str(tmp_path / "home"), FO_VENV=str(venv), PYTHON=sys.executable, FO_EXTRAS="test,notebooks")
    res = subprocess.run([str(ROOT / "run_all.sh"), "--setup-only", "--output", str(tmp_path / "out")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (venv / ".fo_lib-installed").exists() and not (tmp_path / "out").exists()
    assert not any("papermill" in c for c in log.read_text().splitlines())
