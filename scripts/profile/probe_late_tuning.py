"""Why a tuning late in a long process can time every candidate alike (issue 23): the LLM benchmark's
shapes before one shape (default: the 26 before the one-wave 1100 x 1792 x 5120, without the cluster
twins, as ``ab_sm90_llm.py`` runs them), then that shape's tuning candidates timed as autotuning
times them (:func:`fo_lib.gemm.sm90.time_candidates`, in ``--tune-rounds`` rounds) several times
over, each timing between two readings of the GPU's clocks, power, temperature and throttle reasons
(``nvidia-smi``). Prints a line per timing: the pick (``sm90.tuning_pick``) and every candidate's
median; ``--fresh`` times the candidates first, before any other shape, for comparison; ``--settle``
times them after other idles than autotuning's; ``--bench`` then runs the LLM benchmark's row of the
shape (its own tuning, its pick against the cluster twin in the same rounds). The shapes before it
tune afresh: autotuning writes to a temporary file (``FO_SM90_AUTOTUNE_FILE``), the kernels come
from the usual cache.

    python scripts/profile/probe_late_tuning.py --shape 26 --reps 3 10 3
    python scripts/profile/probe_late_tuning.py --shape 3 --fresh --reps 3 3 3 --tune-rounds 10 30  # picks by rounds
    python scripts/profile/probe_late_tuning.py --shape 26 --reps 3 3 --settle 0 -1 --bench  # idle or not, then the benchmark
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib.experiments.gpu_clocks import gpu_state  # noqa: E402


def time_candidates(index: int, reps_list, label: str, tune_rounds=(None,), settles=(None,)) -> None:
    """Time shape ``index``'s tuning candidates once per entry of ``reps_list`` (calls per graph), of
    ``tune_rounds`` (rounds per timing; None: autotuning's own) and of ``settles`` (seconds of idle
    before a timing; None: autotuning's own), printing the pick and every median."""
    import torch

    from fo_lib.experiments.gemm_llm import SHAPES
    from fo_lib.experiments.kernel_bench import input_sets
    from fo_lib.experiments.tuning_agreement import candidates
    from fo_lib.gemm import autotune, sm90

    _, M, N, K = SHAPES[index]
    sms = sm90.sm_count()
    sets = input_sets(M, N, K, torch.bfloat16)
    cands, _, model = candidates(M, N, K, sms)
    a, b = sets[0][0], sets[0][1]
    for reps in reps_list:
        for rounds in tune_rounds:
            rounds = rounds or autotune.ROUNDS
            for settle in settles:
                before, t0 = gpu_state(), time.perf_counter()
                ms = sm90.time_candidates(cands, "bf16", a, b, sms, model, reps, rounds=rounds, settle_s=settle)
                after = gpu_state()
                pick = sm90.tuning_pick(ms, cands, model, M, N, sms)
                every = " ".join(f"{k}={v * 1e3:.1f}" for k, v in sorted(ms.items(), key=lambda kv: kv[1]))
                idle = "tuning's" if settle is None else f"{settle:g} s"
                print(f"{label:6s} {M}x{N}x{K} reps {reps:2d} rounds {rounds:2d} idle {idle}: pick {pick} | {every} us "
                      f"({time.perf_counter() - t0:.2f} s) | before {before} | after {after}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", type=int, default=26, help="index into gemm_llm.SHAPES of the shape to tune")
    p.add_argument("--reps", type=int, nargs="+", default=[3, 10, 3], help="calls per graph, one timing each")
    p.add_argument("--rounds", type=int, default=30, help="rounds of the shapes benchmarked before")
    p.add_argument("--fresh", action="store_true", help="also time the candidates before any other shape")
    p.add_argument("--tune-rounds", type=int, nargs="+", default=[0],
                   help="rounds per timing, each reps entry timed with each (0: autotuning's own)")
    p.add_argument("--settle", type=float, nargs="+", default=[-1.0],
                   help="seconds of idle before each timing, each timed with each (-1: autotuning's own)")
    p.add_argument("--bench", action="store_true",
                   help="then the LLM benchmark's row of the shape itself (its pick against its cluster twin)")
    args = p.parse_args(argv)
    from fo_lib.experiments import gemm_llm
    from fo_lib.gemm import sm90
    if not 0 <= args.shape < len(gemm_llm.SHAPES):
        p.error(f"--shape: an index below {len(gemm_llm.SHAPES)}")
    if any(s < 0 and s != -1 for s in args.settle):
        p.error("--settle: seconds >= 0, or -1 for autotuning's own")
    settles = [None if s == -1 else s for s in args.settle]
    if not sm90.is_supported():
        sys.exit("probe_late_tuning: needs a compute capability 9.0 GPU")
    from fo_lib.gemm import autotune
    os.environ[autotune.FILE_ENV] = str(Path(tempfile.mkdtemp(prefix="late_tuning_")) / autotune.FILE_NAME)
    autotune.forget()
    print(f"tunings go to {autotune.cache_path()}", flush=True)
    if args.fresh:
        time_candidates(args.shape, args.reps, "fresh", args.tune_rounds, settles)
    print(f"idle {gpu_state()}", flush=True)
    if args.shape:  # (an empty list would mean every shape)
        gemm_llm.measure_rows(args.rounds, 3, 0, list(range(args.shape)), cluster=False)
    time_candidates(args.shape, args.reps, "late", args.tune_rounds, settles)
    if args.bench:
        row = gemm_llm.measure_rows(args.rounds, 3, 0, [args.shape], cluster=True)[0]
        print(f"bench  pick {row['config']} {row['ours_ms'] * 1e3:.1f} us, cluster twin {row.get('twin_config')}"
              f" {(row.get('twin_ms') or float('nan')) * 1e3:.1f} us, cuBLAS {row['cublas_ms'] * 1e3:.1f} us", flush=True)


if __name__ == "__main__":
    main()
