"""The Nsight Compute driver of the Hopper GEMM against cuBLAS: its config labels read back."""
import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from fo_lib.gemm import sm90

_PATH = Path(__file__).resolve().parent.parent / "scripts" / "profile" / "profile_sm90_vs_cublas.py"
_spec = importlib.util.spec_from_file_location("profile_sm90_vs_cublas", _PATH)
prof = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(prof)


@pytest.mark.parametrize("name", sorted(sm90.CONFIGS))
def test_every_label_reads_back_as_its_config(name):
    base = sm90.CONFIGS[name]
    for order, swizzle, sk in (("row", 8, False), ("col", 2, False), ("row", 1, base.cluster == 1)):
        cfg = replace(base.with_raster(order, swizzle), stream_k=sk)
        assert prof.parse_label(sm90.config_label(cfg)) == cfg


def test_the_default_shapes_name_known_configs():
    assert all(prof.parse_label(label).tile_name for *_, label in prof.SHAPES)


@pytest.mark.parametrize("label", ["128x256x64", "128x300x64/row8", "128x256x64/diag8", "x/row8+sk"])
def test_a_bad_label_is_one_line(label):
    with pytest.raises(SystemExit, match="not a config label"):
        prof.parse_label(label)


@pytest.mark.parametrize("label,match", [("128x176x64c2/row8+sk", "stream_k"), ("128x256x64/row0", "swizzle")])
def test_a_config_the_kernel_cannot_run_is_refused(label, match):
    with pytest.raises(SystemExit, match=match):
        prof.parse_label(label)
