"""What the Hopper GEMM's GPU test files share: the compute capability 9.0 skip mark and the config
names (imported once a test module knows torch and a CUDA GPU are there)."""
import pytest

from fo_lib.gemm import sm90 as gemm_sm90

NEEDS_SM90 = pytest.mark.skipif(not gemm_sm90.is_supported(), reason="needs a compute capability 9.0 GPU")
CONFIG_NAMES = list(gemm_sm90.CONFIGS)
