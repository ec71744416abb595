import os

import pytest

# Hypothesis: deterministic-enough and bounded for the 2-core CI machine.
from hypothesis import settings

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=False)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def nvrtc():
    """NVRTC for a compile check: where it is missing, a skip on a development machine and a failure
    in CI (which installs it, so its absence there is a broken setup)."""
    from fo_lib import jit

    try:
        jit.nvrtc_version()
    except jit.CudaUnavailableError:
        if os.environ.get("CI"):
            raise
        pytest.skip("NVRTC (cupy) not installed")


# The Hopper tile-table tests' folder (tests/sm90_tile_tables.py writes their tables into it).
@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """An empty data folder seen as that of an 'h200'."""
    from fo_lib import provenance
    from fo_lib.gemm import tile_table

    monkeypatch.setattr(provenance, "DATA_DIR", tmp_path)
    monkeypatch.setattr(tile_table, "current_gpu_tag", lambda: "h200")
    monkeypatch.delenv(tile_table.ENV_VAR, raising=False)
    return tmp_path


@pytest.fixture
def tuning_cache(tmp_path, monkeypatch):
    """A fresh folder for the GEMM autotuning's remembered configs: the file's path, forgotten in
    memory before and after."""
    from fo_lib.gemm import config_tuning

    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path))
    config_tuning.forget()
    yield tmp_path / config_tuning.FILE_NAME
    config_tuning.forget()

