"""The whole partition space of one shape on a GPU: every partition of its waves (``T <=``
:data:`MAX_WAVES`) measured over the emulated link beside the refined model's prediction from the
same run's GEMM profile and link curve (:func:`fo_lib.experiments.overlap_measure.measure`), drawn as
measured against predicted with the model's choice and the best measured marked.

:func:`measure_space` needs a CUDA GPU; :func:`summarize` (:func:`fo_lib.experiments.heldout.shape_summary`)
and :func:`draw_space` are pure.
"""
from __future__ import annotations

from ..heldout import shape_summary as summarize, spearman, sweep_waves  # noqa: F401 (the space's numbers)

MAX_WAVES = 8  # 2^(T-1) = 128 partitions at most: about a minute on an H200


def measure_space(M: int, N: int, K: int, primitive: str = "all_reduce", *, world: int = 2, model_kw=None):
    """Every partition of ``M x N x K``'s waves measured under ``primitive`` on the emulated link:
    one row per partition (partition, groups, measured_ms, model_ms, ...)."""
    from ..overlap_measure import measure
    waves = sweep_waves(M, N, K)
    if waves > MAX_WAVES:  # checked first: the sweep would build 2^(T-1) plans
        raise ValueError(f"{M} x {N} x {K} runs {waves} waves: the whole space is measured up to {MAX_WAVES}")
    _, cands, _ = measure(world=world, primitives=(primitive,), shapes=[(M, N, K)],
                          candidates_limit=2 ** (MAX_WAVES - 1), graphs=False, model_kw=model_kw)
    return cands


def draw_space(cands, title: str = ""):
    """Measured against predicted, one point per partition, the model's choice and the best measured
    marked, the identity line for reference; returns the figure."""
    import matplotlib.pyplot as plt

    s = summarize(cands)
    fig, ax = plt.subplots(figsize=(6.4, 5.2), layout="constrained")
    ax.scatter(cands.model_ms, cands.measured_ms, s=14, color="0.55", label=f"a partition ({s['partitions']})")
    lo = min(cands.model_ms.min(), cands.measured_ms.min())
    hi = max(cands.model_ms.max(), cands.measured_ms.max())
    ax.plot([lo, hi], [lo, hi], color="0.8", linewidth=1, zorder=0, label="measured = predicted")
    for which, colour, marker in (("chosen", "tab:blue", "o"), ("best", "tab:orange", "*")):
        row = cands[cands.partition == s[which]].iloc[0]
        ax.scatter([row.model_ms], [row.measured_ms], s=110, color=colour, marker=marker, edgecolor="black",
                   label=("the model's choice " if which == "chosen" else "the best measured ") + s[which])
    ax.set(xlabel="predicted time of the call (ms)", ylabel="measured time of the call (ms)",
           title=title or "Every partition of one shape, measured against predicted")
    ax.legend(loc="upper left", fontsize=8)
    ax.text(0.98, 0.02, f"rank correlation {s['spearman']:.2f}; chosen / best {s['chosen_over_best']:.3f}",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=8)
    return fig
