"""Table 5's measure path as far as a CPU can check it: the kernel benchmarks' shapes and options
(fo_lib.experiments.kernel_bench), notebook 06's measure mode (fo_lib.experiments.overheads.run)
with the GPU work stubbed, and the scripts that are command lines over the same core. The GPU side:
tests/gpu/test_kernel_bench_gpu.py."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fo_lib import experiments as ex
from fo_lib.experiments import kernel_bench as kb

ROOT = Path(__file__).resolve().parents[1]

def test_quick_kernel_benchmarks_are_a_small_subset_of_the_full_grids():
    full, quick = kb.gemm_shapes(), kb.gemm_shapes(quick=True)
    assert len(full) == 30 and 0 < len(quick) <= 4 and set(quick) <= set(full)
    assert full[:3] == [(1024, 4096, 1024), (1024, 4096, 4096), (1024, 4096, 8192)]  # M outermost, as printed
    assert set(kb.postops_shapes(True)) <= set(kb.postops_shapes()) and len(kb.postops_shapes()) == 12
    assert kb.gemm_rounds(True) == (6, 3) and kb.gemm_rounds(False, rounds=30) == (30, 5)


def test_overheads_plan_matches_the_script_command_it_records():
    import argparse

    plan = ex.overheads.measure_plan(quick=True)
    g = plan["gemm_portable"]
    assert g["options"]["graph"] and g["options"]["control"]  # the figure draws the control
    # The recorded command, read back by the script's own options, names the same shapes.
    p = argparse.ArgumentParser()
    for axis in ("M", "N", "K"):
        p.add_argument(f"--{axis}", type=int, nargs="*")
    args, _ = p.parse_known_args(g["command"].split()[1:])
    assert kb.shape_grid(args.M, args.N, args.K) == g["shapes"]
    assert "--quick" in g["command"] and "--quick" not in ex.overheads.measure_plan()["gemm_portable"]["command"]


@pytest.mark.skipif(ex.have_gpu(), reason="checks the error a machine without a GPU gives")
def test_overheads_measure_without_a_gpu_is_a_clear_error_and_auto_replays():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        ex.overheads.run("measure", "h200", quick=True)
    assert ex.overheads.run("auto", "h200", quick=True) == "h200"


@pytest.mark.parametrize("script", ["bench_gemm.py", "bench_postops.py", "bench_gemm_sm90.py"])
def test_benchmark_scripts_still_parse_their_options(script):
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / script), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--out" in out.stdout and "--quick" in out.stdout


def test_overheads_measure_records_both_benchmarks_with_provenance(monkeypatch, tmp_path):
    """The measure path's plumbing with the GPU work stubbed: what it runs, where it records, and
    that the loaders read the record back."""
    from fo_lib.experiments import common

    ran = {}

    def fake_gemm(shapes, **options):
        ran["gemm"] = (list(shapes), options)
        rows = [dict(M=m, N=n, K=k, variant=v, median_ms=t) for m, n, k in shapes
                for v, t in (("torch", 1.0), ("ours", 1.0), ("signal", 1.01), ("ours_again", 1.002))]
        return pd.DataFrame(rows), None

    def fake_postops(shapes, **options):
        ran["postops"] = (list(shapes), options)
        return pd.DataFrame([dict(R=r, N=n, variant="ours_rms", ratio="1.05") for r, n in shapes])

    monkeypatch.setattr(common, "have_gpu", lambda: True)
    monkeypatch.setattr(common, "DATA_DIR", tmp_path)
    monkeypatch.setattr(kb, "run_gemm", fake_gemm)
    monkeypatch.setattr(kb, "run_postops", fake_postops)
    tag = ex.overheads.run("auto", "h200", quick=True)
    assert tag.endswith("-quick")
    assert ran["gemm"][0] == kb.gemm_shapes(True) and ran["gemm"][1]["control"]
    assert ran["postops"][0] == kb.postops_shapes(True)
    g, meta = ex.overheads.gemm_overheads(tag)
    assert meta["command"].startswith("bench_gemm.py --graph --control --quick") and meta["rounds"] == 6
    assert g.signal_pct.round(6).eq(1.0).all() and len(g) == len(kb.gemm_shapes(True))
    r, _ = ex.overheads.rmsnorm_overheads(tag)
    assert np.allclose(r.overhead_pct, 5.0)


def _script(name):
    from script_loader import load_script
    return load_script(f"scripts/bench/{name}.py")


def test_bench_gemm_script_passes_its_options_to_the_core_and_writes_its_csv(monkeypatch, tmp_path, capsys):
    seen = {}

    def fake(shapes, **kw):
        seen.update(shapes=list(shapes), **kw)
        names = ("torch", "ours", "signal", "signal_4g", "signal_table", "signal_rows", "scatter", "ours_again")
        rows = [dict(M=m, N=n, K=k, dtype="bf16", variant=v, median_ms=1.0 + 0.01 * i)
                for m, n, k in shapes for i, v in enumerate(names)]
        return pd.DataFrame(rows), pd.DataFrame([dict(M=1, variant="ours", ms=1.0)])

    monkeypatch.setattr(kb, "run_gemm", fake)
    out = tmp_path / "g.csv"
    _script("bench_gemm").main(["--out", str(out), "--quick", "--M", "2048", "--N", "8192", "--K", "1024", "8192",
                                "--graph", "--control", "--seed", "3", "--samples", str(tmp_path / "s.csv")])
    assert seen["shapes"] == [(2048, 8192, 1024), (2048, 8192, 8192)]
    assert (seen["rounds"], seen["inner"], seen["graph"], seen["control"], seen["seed"]) == (6, 3, True, True, 3)
    assert seen["samples"] and (tmp_path / "s.csv").exists()
    assert pd.read_csv(out).shape[0] == 16 and out.with_suffix(".meta.json").exists()
    assert "ours_again vs plain" in capsys.readouterr().out


def test_bench_postops_script_passes_its_options_to_the_core_and_writes_its_csv(monkeypatch, tmp_path):
    import torch

    seen = {}

    def fake(shapes, **kw):
        seen.update(shapes=list(shapes), **kw)
        return pd.DataFrame([dict(R=r, N=n, variant="ours_rms", ratio=f"{1 + r / 1e5:.4f}") for r, n in shapes])

    monkeypatch.setattr(kb, "run_postops", fake)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "test device")
    out = tmp_path / "p.csv"
    _script("bench_postops").main(["--out", str(out), "--quick", "--no-graph", "--R", "1024", "--tpr", "256"])
    assert seen["shapes"] == [(1024, n) for n in kb.POSTOPS_SHAPES["N"]]
    assert (seen["rounds"], seen["graph"], seen["tprs"], seen["BN"]) == (7, False, [256], 128)
    assert pd.read_csv(out).shape[0] == 4


def test_config_variants_take_a_stream_k_tail_by_suffix():
    from dataclasses import replace

    from fo_lib.experiments.kernel_bench import add_config_variants
    from fo_lib.gemm import sm90

    ran = []

    class Family:
        @staticmethod
        def gemm_nt(a, b, out, config):
            ran.append(config)

    fns = {}
    add_config_variants(fns, Family, sm90.CONFIGS, ["128x256x64", "128x256x64+sk"], [(1, 2, 3)], 1100)
    for f in fns.values():
        f(0)
    assert list(fns) == ["cfg:128x256x64", "cfg:128x256x64+sk"]
    assert [c.stream_k for c in ran] == [False, True]
    assert ran[0] == sm90.CONFIGS["128x256x64"].with_raster("row", 8) and ran[1] == replace(ran[0], stream_k=True)


def test_config_variant_reads_a_config_label_and_refuses_a_bad_one():
    from fo_lib.gemm import sm90

    for label in ("128x128x64c2/row8", "128x256x64/col4+sk", "128x176x64pd/row1+sk"):
        c = kb.config_variant(sm90.CONFIGS, label, 1100)
        assert sm90.config_label(c) == label
    assert kb.config_variant(sm90.CONFIGS, "128x128x64", 300).swizzle == 3  # up to 8 tile rows: M has 3
    with pytest.raises(KeyError):
        kb.config_variant(sm90.CONFIGS, "128x999x64", 1)
    for bad in ("128x128x64/diag2", "128x128x64/row"):
        with pytest.raises(ValueError, match="row<N> or col<N>"):
            kb.config_variant(sm90.CONFIGS, bad, 1)
    for bad, why in (("128x128x64c2+sk", "clusters run whole waves"), ("128x128x64/row0", "swizzle")):
        with pytest.raises(ValueError, match=why):  # what the kernel cannot run: refused before any launch
            kb.config_variant(sm90.CONFIGS, bad, 1)
