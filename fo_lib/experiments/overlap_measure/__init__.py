"""The overlap benchmark, measured (GPU): per (primitive, shape), every candidate partition's
overlapped call (eager and as one CUDA graph) beside the non-overlapped baselines and the refined
model's prediction, plus the host cost of an overlapped call.

``scripts/bench/bench_overlap.py`` (one GPU, loopback link) and ``scripts/bench/bench_nccl.py`` (torchrun, NCCL)
call :func:`measure` and :func:`write_records`; :mod:`fo_lib.experiments.overlap` loads and summarises the records.

Modules: :mod:`.cases` (one case: its plans, timed variants and medians), :mod:`.summary` (its
records), :mod:`.sweep` (:func:`measure`, every case), :mod:`.host_overhead` (:func:`host_overhead`),
:mod:`.records` (:func:`load_model_params`, :func:`write_records`).
"""
from .cases import candidate_partitions
from .host_overhead import host_overhead
from .records import load_model_params, write_records
from .summary import SUMMARY_COLUMNS
from .sweep import measure

__all__ = ["SUMMARY_COLUMNS", "candidate_partitions", "host_overhead", "load_model_params", "measure", "write_records"]
