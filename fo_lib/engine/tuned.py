"""A wave-group partition tuned from a GPU's calibrated (or recorded) offline results, without
running candidates: the paper's online phase.

The latency curve of the primitive on the link (the emulated link's from the overlap sweep's
``overlap_loopback_profiles.json``; NCCL's from ``nccl_curves.csv`` at the world size), the GEMM's
wave profile (measured by the caller, e.g. an :class:`fo_lib.engine.OverlapPlan` on its GPU, or the
one recorded for this very shape) and the refined model's fitted constants, each found by
:func:`fo_lib.store.find`: the user's calibration first, then ``data/<gpu>/``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..profiles import ProfileError
from .. import store


@dataclass(frozen=True)
class Tuned:
    """A tuned partition and what it came from."""
    partition: tuple
    predicted_ms: float
    no_overlap_ms: float
    curve_from: str
    profile_from: str
    model_params: dict

    @property
    def speedup(self) -> float:
        return self.no_overlap_ms / self.predicted_ms


def link_of(comm) -> str:
    """``"nccl"`` for a torch.distributed NCCL communicator, else ``"emulated"`` (the loopbacks)."""
    return "nccl" if getattr(comm, "link", "") == "nccl" else "emulated"


def nccl_budget(comm) -> int:
    """The NCCL CTA budget a communicator's curves were recorded at (``nccl_max_ctas``: 0 for NCCL's
    default); a copy-engine communicator's curves are not recorded in the table."""
    if getattr(comm, "copy_engine", False):
        raise ProfileError("no NCCL curves are recorded for the copy engines (copy_engine=True): pass a partition")
    return int(getattr(comm, "max_ctas", None) or 0)


def curve_for(primitive: str, world: int, gpu: str, link: str = "emulated", budget: int = 0):
    """``(curve, where)``: ``gpu``'s latency curve of ``primitive`` on ``link`` at ``world`` ranks. The
    emulated link's comes from the overlap sweep of ``gpu`` (recorded at 2 virtual ranks); NCCL's
    from ``nccl_curves.csv`` of the GPUs together (folder ``<gpu>x<world>``) at the CTA ``budget``."""
    from ..records import read_curve

    if link == "nccl":
        folder, name = f"{gpu}x{world}", store.NCCL_CURVES
        how = f"record them with scripts/multi_gpu.sh (scripts/bench/bench_nccl.py) into data/{folder}/"
    else:
        folder, name = gpu, store.PROFILES
        how = f"run `{store.CALIBRATE}` on that GPU"
    found = store.find(name, folder, what=f"{link} link curves", warn=False)
    if found is None:
        raise ProfileError(f"no {link} link curves for {folder}: {how}")
    curve = read_curve(found.path, primitive=primitive, world=world if link == "nccl" else None,
                       budget=budget if link == "nccl" else None)
    if curve.world_size != world:
        raise ProfileError(f"{found.path}: the {primitive} curve is of {curve.world_size} ranks, not {world} "
                           "(the emulated link's curves are recorded at 2 virtual ranks)")
    return curve, f"{found.source} {found.path}"


def recorded_profile(primitive: str, M: int, N: int, K: int, gpu: str):
    """``(profile, where)``: the GEMM profile ``gpu``'s overlap sweep recorded for this shape."""
    from ..records import read_profile

    found = store.find(store.PROFILES, gpu, what="GEMM wave profiles", warn=False)
    if found is None:
        raise ProfileError(f"no GEMM profiles recorded for {gpu}: run `{store.CALIBRATE}` on that GPU")
    profile, _, _ = read_profile(found.path, shape=(M, N, K), primitive=primitive)
    return profile, f"{found.source} {found.path}"


def tuned_partition(primitive: str, M: int, N: int, K: int, *, world: int, gpu: str, link: str = "emulated",
                    budget: int = 0, profile=None) -> Tuned:
    """The partition the refined model picks for ``M x N x K`` under ``primitive`` at ``world``
    ranks on ``gpu`` (a data folder name such as 'h200'), from its calibrated curve and the
    constants fitted on the same link (none: the model's defaults). ``profile``: the GEMM's measured
    wave profile (default: the one recorded for this shape, an error where there is none)."""
    from ..predictor import OverlapModel

    curve, curve_from = curve_for(primitive, world, gpu, link, budget)
    profile_from = "measured by the caller"
    if profile is None:
        profile, profile_from = recorded_profile(primitive, M, N, K, gpu)
    fitted = (store.model_params(f"{gpu}x{world}", store.NCCL_MODEL) if link == "nccl"
              else store.model_params(gpu))  # constants of the link the curve is of, never the other's
    params = (fitted or {}).get(primitive, {})
    result = OverlapModel(profile, curve, "refined", **params).tune()
    choice = result.choice  # one group (no overlap) where the model predicts that no split pays
    return Tuned(tuple(int(g) for g in choice.partition), float(choice.total_ms), float(result.no_overlap.total_ms),
                 curve_from, profile_from, dict(params))


def plan_partition(plan, T: int) -> tuple[int, ...]:
    """``OverlapPlan(partition="tuned")`` (CUDA): the refined model's partition from this GPU's
    calibrated link curve and fitted constants (``python -m fo_lib calibrate``, else the record in
    ``data/<gpu>/``; NCCL: ``data/<gpu>x<world>/``) over the plan's GEMM wave profile, measured here on
    the plan's config and CTAs. Rank 0 measures and chooses, every rank runs its choice or raises
    its error (a rank deciding alone could leave the others waiting in a collective). All-to-All is
    tuned as for uniform routing; the emulated link's curves are recorded at 2 virtual ranks."""
    from .errors import PlanError
    if plan.device != "cuda":
        raise PlanError("partition='tuned' measures the GEMM's waves on the GPU; on the CPU pass the "
                        "partition that fo_lib.engine.tuned.tuned_partition(..., gpu='h200') returns")
    if plan.reduction != "collective":
        raise PlanError("partition='tuned' reads the curves of the collectives that reduce "
                        "(reduction='collective'), not those of reduction='post_reorder'")
    bcast = getattr(plan.comm, "broadcast_object", None)
    outcome = _choose(plan, T) if plan.rank == 0 or bcast is None else None
    if bcast is not None:
        outcome = bcast(outcome)
    kind, value = outcome
    if kind == "error":
        raise PlanError(f"partition='tuned': {value}")
    return tuple(value)


def _choose(plan, T: int) -> tuple[str, object]:
    """``("ok", partition)`` or ``("error", one line)``: what rank 0 tells every rank."""
    from .. import partition_tuning
    from ..gemm.tile_table import current_gpu_tag
    try:
        profile = partition_tuning.measure_gemm_profile(plan.M, plan.N, plan.K, config=plan.config, ctas=plan.ctas,
                                                        dtype=plan.dtype)
        if profile.num_waves != T:
            return "error", f"the measured profile has {profile.num_waves} waves, the plan {T}"
        link = link_of(plan.comm)
        choice = tuned_partition(plan.primitive, plan.M, plan.N, plan.K, world=plan.world_size, gpu=current_gpu_tag(),
                                 link=link, budget=nccl_budget(plan.comm) if link == "nccl" else 0, profile=profile)
    except (ProfileError, RuntimeError) as exc:  # RuntimeError: CUDA out of memory, a kernel that failed
        return "error", " ".join(str(exc).split())
    return "ok", choice.partition
