"""Why a one-wave shape's tuning and the LLM benchmark rank its configs differently (issue 23): the
same configs timed in the same process in several contexts, alternating, each ``--cycles`` times:

* ``tuning``: as autotuning times them (:func:`fo_lib.gemm.sm90.time_candidates`, no idle before);
* ``tuning+cublas``: the same, with ``torch.matmul`` on the tuning's operand sets among them;
* ``bench``: as the LLM benchmark times its variants (``sm90.gemm_nt`` on its rotating input sets);
* ``bench+cublas``: the same with ``torch.matmul`` among them, as the benchmark's rounds have it;
* ``hot``: ``tuning`` right after ``--heat`` seconds of large GEMMs (a power-capped GPU).

Prints, per context and cycle, each config's median (us) and its ratio to the first config, and the
GPU's clocks around each timing. Nothing is written to the autotune cache (explicit configs).

    python scripts/profile/probe_one_wave_context.py --shape 26 --cycles 3
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib.experiments.gpu_clocks import gpu_state  # noqa: E402

LABELS = ["128x128x64c2/row8", "128x128x64/col8", "128x128x64p/col8", "128x128x64c2p/row1", "128x128x64/row1"]
CONTEXTS = ("tuning", "tuning+cublas", "bench", "bench+cublas", "hot")


def heat(seconds: float) -> None:
    """Large back-to-back GEMMs for ``seconds`` (the GPU ends at its power cap)."""
    import torch
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            torch.matmul(x, x)
        torch.cuda.synchronize()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", type=int, default=26, help="index into gemm_llm.SHAPES")
    p.add_argument("--labels", nargs="+", default=LABELS, help="configs (NAME/RASTER as config_label writes them)")
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--heat", type=float, default=1.5, help="seconds of large GEMMs before the 'hot' context")
    args = p.parse_args(argv)
    import torch

    from fo_lib.experiments.gemm_llm import SHAPES
    from fo_lib.experiments.kernel_bench import config_variant, input_sets
    from fo_lib.gemm import autotune, sm90
    from fo_lib.testing import bench_interleaved, summarize

    if not sm90.is_supported():
        sys.exit("probe_one_wave_context: needs a compute capability 9.0 GPU")
    _, M, N, K = SHAPES[args.shape]
    sms = sm90.sm_count()
    cfgs = [config_variant(sm90.CONFIGS, lbl, M) for lbl in args.labels]
    labels = [sm90.config_label(c) for c in cfgs]
    sets = input_sets(M, N, K, torch.bfloat16)
    n = len(sets)
    model = sm90.default_config(M, N, K, sms)
    print(f"{M} x {N} x {K}: {n} input sets, model's pick {sm90.config_label(model)}, one wave: "
          f"{sm90.one_wave(model, M, N, sms)}", flush=True)

    def cublas_on(pairs, outs):
        return lambda i: torch.matmul(pairs[i % len(pairs)][0], pairs[i % len(pairs)][1].T, out=outs[i % len(outs)])

    def timing(context: str, cycle: int) -> dict:
        if context.startswith("tuning") or context == "hot":
            runs = sm90.tuning_runs(cfgs, "bf16", sets[0][0], sets[0][1], sms)
            if context.endswith("cublas"):
                first = next(iter(runs.values()))
                runs["cublas"] = cublas_on(first.sets, first.outs)
        else:
            runs = {lbl: (lambda c: lambda i: sm90.gemm_nt(*sets[i % n], config=c))(c) for lbl, c in zip(labels, cfgs)}
            if context.endswith("cublas"):
                runs["cublas"] = cublas_on([s[:2] for s in sets], [s[2] for s in sets])
        if context == "hot":
            heat(args.heat)
        return summarize(bench_interleaved(runs, rounds=args.rounds, inner=autotune.REPS, warmup=1, graph=True,
                                           order="shuffle", seed=cycle, capture_error_mode="thread_local"))

    for cycle in range(args.cycles):
        for context in CONTEXTS:
            before = gpu_state()
            ms = timing(context, cycle)
            after = gpu_state()
            ref = ms[labels[0]]
            every = " ".join(f"{k}={v * 1e3:.1f}({v / ref:.3f})" for k, v in ms.items())
            print(f"cycle {cycle} {context:13s} {every} | sm MHz {before.get('sm_mhz')} -> {after.get('sm_mhz')}, "
                  f"W {before.get('power_w')} -> {after.get('power_w')}", flush=True)


if __name__ == "__main__":
    main()
