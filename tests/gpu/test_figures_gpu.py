"""Fig. 13 and Fig. 14's measurements on one GPU, small: every cell and variant gets a finite time,
and a misgrouped plan (groups cut inside real waves) computes the right result."""
import numpy as np
import pytest
import torch

from fo_lib.comm.loopback import LoopbackCommunicator
from fo_lib.experiments import ablation, heatmap


def test_misgrouped_plan_matches_torch_on_the_gpu():
    W, M, N, K = 2, 2048, 4096, 512
    comm = LoopbackCommunicator(W)
    plan = ablation.MisgroupedPlan("all_reduce", M, N, K, comm, group_wave_tiles=148)
    real_waves = plan.config.grid(M, N, plan.ctas).num_waves
    assert plan.grid.ctas == 148 and plan.ctas != 148 and sum(plan.group_tiles) == plan.grid.num_tiles
    a = torch.randn(M, K, device="cuda").bfloat16()
    b = torch.randn(N, K, device="cuda").bfloat16()
    want = W * (a.float() @ b.float().T)
    got = plan.run(a, b).float()
    plan.check()
    assert real_waves >= 2
    assert torch.allclose(got, want, rtol=2e-2, atol=0.5)


@pytest.mark.timeout(300)
def test_heatmap_and_ablation_measure_small_shapes():
    comm = LoopbackCommunicator(2)
    cells, _, _ = heatmap.measure(comm, primitives=("all_reduce",), shapes=[(256, 4096, 512), (2048, 4096, 512)],
                                          rounds=1, inner=1)
    assert len(cells) == 2 and np.isfinite(cells[["speedup", "bound_ratio"]].to_numpy()).all()
    assert cells.set_index("M").waves[256] == 1  # one wave: nothing to overlap
    df = ablation.measure(comm, quick=True, cases=[("all_reduce", (2048, 4096, 512))], rounds=1, inner=1)
    assert {"tuned", "Egs=1", "wave size +20"} <= set(df.variant)
    assert np.isfinite(df.relative_to_tuned).all() and (df[df.variant == "tuned"].relative_to_tuned == 1).all()
