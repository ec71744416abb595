"""The Hopper GEMM's autotuning on the GPU: a shape timed once and remembered, the one-wave handicap of
single CTAs, graph captures and failed tunings, and the timed calls' rotating operand copies."""
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import gemm  # noqa: E402
from fo_lib.gemm import sm90 as gemm_sm90  # noqa: E402
from fo_lib.testing import calc_diff  # noqa: E402
from gemm_helpers import TOL, guarded_out, inputs, ref  # noqa: E402
from sm90_cases import NEEDS_SM90  # noqa: E402

pytestmark = [pytest.mark.gpu, NEEDS_SM90]


def _tuning_setup(tmp_path, monkeypatch):
    """A fresh tuning cache, and the H200's tile table to shortlist from on any sm_90 GPU (autotuning
    needs a table; which GPU recorded it does not matter to these checks)."""
    from fo_lib import provenance
    from fo_lib.gemm import config_tuning, tile_table
    monkeypatch.setenv(tile_table.ENV_VAR, str(provenance.DATA_DIR / "h200" / tile_table.TABLE_NAME))
    monkeypatch.setenv("FO_CACHE_DIR", str(tmp_path))
    config_tuning.forget()


def test_autotune_times_a_shape_once_and_remembers_it(tmp_path, monkeypatch):
    """The first plain call of a shape times the model's shortlist and runs the winner (checked
    against float64); the cache file holds it, another process reads it back without timing, and
    FO_SM90_AUTOTUNE=0 runs the model's pick."""
    from fo_lib.gemm import config_tuning
    _tuning_setup(tmp_path, monkeypatch)
    M, N, K = 2048, 7168, 1024
    a, b = inputs(M, N, K, "bf16", seed=23)
    buf, out, mask = guarded_out(M, N, "bf16")
    gemm_sm90.gemm_nt(a, b, out)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "unwritten (NaN) elements in the output"
    assert torch.isnan(buf[~mask]).all(), "the kernel wrote outside the output view"
    assert calc_diff(out, ref(a, b)) < TOL["bf16"]
    (entry,) = json.loads((tmp_path / config_tuning.FILE_NAME).read_text()).values()
    cfg = gemm_sm90.config_for(a, b)
    label, ms = gemm_sm90.config_label(cfg), entry["ms"]
    assert len(ms) >= 2 and label in ms and entry["model"] in ms and all(v > 0 for v in ms.values())
    assert ms[label] == min(ms.values()) or label == entry["model"]
    config_tuning.forget()  # as another process: the file, no timing
    monkeypatch.setattr(config_tuning, "time_launches", lambda *a, **k: pytest.fail("timed a remembered shape"))
    assert gemm_sm90.config_for(a, b) == cfg
    monkeypatch.setenv(config_tuning.ENV_VAR, "0")
    assert gemm_sm90.config_for(a, b) == gemm_sm90.default_config(M, N, K, gemm.sm_count())
    config_tuning.forget()


def test_a_one_wave_tuning_keeps_a_cluster_unless_a_single_cta_is_well_ahead(tmp_path, monkeypatch):
    """On a one-wave grid a single-CTA candidate's time counts config_tuning.ONE_WAVE_SINGLE_CTA more:
    timings with every single CTA 1 % ahead of every cluster pick a cluster, 5 % ahead a single CTA."""
    from fo_lib.gemm import config_tuning
    _tuning_setup(tmp_path, monkeypatch)
    M, N, K = 1100, 1792, 512  # 9 x 14 tiles of 128 x 128: one wave
    a, b = inputs(M, N, K, "bf16", seed=29)
    for lead, cluster in ((0.01, 2), (0.05, 1)):
        config_tuning.clear()
        timed = []

        def fake(runs, lead=lead, **kw):
            timed.append(list(runs))
            return {label: 1.0 if "c2" in label else 1.0 - lead for label in runs}

        monkeypatch.setattr(config_tuning, "time_launches", fake)
        assert gemm_sm90.config_for(a, b).cluster == cluster
        assert any("c2" in label for label in timed[0]) and any("c2" not in label for label in timed[0])
    config_tuning.forget()


def test_autotune_inside_a_graph_capture_and_after_a_failed_tuning(tmp_path, monkeypatch):
    """Under a CUDA-graph capture a tuned shape runs its winner and an untuned one the model's pick,
    with nothing timed; a tuning that fails warns once, runs the model's pick and is not retried."""
    from fo_lib.gemm import config_tuning
    _tuning_setup(tmp_path, monkeypatch)
    a, b = inputs(1536, 3584, 2048, "bf16", seed=29)
    tuned = gemm_sm90.config_for(a, b)  # eager: timed and remembered
    c, d = inputs(1024, 8192, 1024, "bf16", seed=31)  # never tuned
    model = gemm_sm90.default_config(1024, 8192, 1024, gemm.sm_count())
    monkeypatch.setattr(config_tuning, "time_launches", lambda *a, **k: pytest.fail("timed inside a capture"))
    with torch.cuda.graph(torch.cuda.CUDAGraph()):  # (nothing is launched: an empty graph)
        got = gemm_sm90.config_for(a, b), gemm_sm90.config_for(c, d)
    assert got == (tuned, model)
    calls = []

    def broken(*args, **kw):
        calls.append(1)
        raise RuntimeError("out of memory (test)")

    monkeypatch.setattr(config_tuning, "time_launches", broken)
    with pytest.warns(RuntimeWarning, match="autotuning 1024 x 8192 x 1024 failed"):
        out = gemm_sm90.gemm_nt(c, d)
    assert calc_diff(out, ref(c, d)) < TOL["bf16"]
    assert gemm_sm90.config_for(c, d) == model and calls == [1]
    config_tuning.forget()


def test_tuning_runs_rotate_over_operand_copies_in_eager_calls_and_graphs():
    """Autotuning's timed calls: call i of a config reads operand set i % n (the caller's, then
    copies in memory of their own) and writes output i % n, eagerly and in the graphs
    config_tuning.time_launches replays; the caller's operands are only read."""
    from fo_lib.gemm import config_tuning
    M, N, K = 300, 520, 136  # small: as many copies as a graph's calls use
    a, b = inputs(M, N, K, "bf16", seed=37)
    want, a0, b0 = ref(a, b), a.clone(), b.clone()
    cfgs = [gemm_sm90.CONFIGS[n] for n in ("128x256x64", "128x128x64c2p", "128x176x64pd")]
    runs = gemm_sm90.tuning_runs(cfgs, "bf16", a, b, gemm.sm_count() // 2 * 2)  # (clusters of 2)
    assert list(runs) == [gemm_sm90.config_label(c) for c in cfgs]
    r0 = runs[gemm_sm90.config_label(cfgs[0])]
    n = len(r0.sets)
    assert n == config_tuning.REPS and r0.sets[0][0] is a and r0.sets[0][1] is b
    ptrs = [t.data_ptr() for x, y in r0.sets for t in (x, y)] + [o.data_ptr() for o in r0.outs]
    assert len(set(ptrs)) == len(ptrs), "operand sets or outputs share memory"
    for k in range(1, n):  # set k holds (k + 1) a: its output must be (k + 1) a b^T
        r0.sets[k][0].mul_(k + 1)
    for label, r in runs.items():
        assert r.sets is r0.sets and r.outs is r0.outs  # the configs share them
        for o in r0.outs:
            o.fill_(float("nan"))
        for i in range(n):
            r(i)
        torch.cuda.synchronize()
        for k, o in enumerate(r0.outs):
            assert calc_diff(o, want * (k + 1)) < TOL["bf16"], (label, k)
    for o in r0.outs:
        o.fill_(float("nan"))
    ms = config_tuning.time_launches(runs, rounds=2)  # graphs of REPS calls: every output written again
    assert set(ms) == set(runs) and all(v > 0 for v in ms.values())
    for k, o in enumerate(r0.outs):
        assert calc_diff(o, want * (k + 1)) < TOL["bf16"], k
    assert torch.equal(a, a0) and torch.equal(b, b0)
