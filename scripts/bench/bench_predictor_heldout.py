"""The predictor on shapes it has never seen (fo_lib.experiments.heldout): a seeded random set of
shapes (printed; M, N, K from 1024 to 16384, 2 to 10 waves, none that a benchmark or test uses),
every partition of their waves measured over the emulated link on this GPU beside the refined
model's prediction with this GPU's fitted constants; prints the mean error and the chosen partition
against the best measured, and writes one row per shape (CSV + provenance sidecar).

    python scripts/bench/bench_predictor_heldout.py --out data/<gpu>/predictor_heldout.csv [--seed S] [--shapes 6]
"""
from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib.experiments import heldout  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=None, help="default: a fresh one, printed")
    ap.add_argument("--shapes", type=int, default=6)
    ap.add_argument("--primitives", nargs="*", default=["all_reduce"])
    ap.add_argument("--comm-sms", type=int, default=4)
    ap.add_argument("--max-waves", type=int, default=heldout.MAX_WAVES)
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else secrets.randbelow(2 ** 31)
    print(f"seed {seed}", flush=True)

    from fo_lib import store
    from fo_lib.experiments.overlap import measure
    from fo_lib.gemm.tile_table import current_gpu_tag
    from fo_lib.provenance import write_result

    import torch
    memory = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    per_element = 2 * (2 if "all_to_all" in args.primitives else 1)  # each plan's send (+ receive) buffer

    def waves_of(M, N, K):
        T = heldout.sweep_waves(M, N, K, args.comm_sms)
        # The sweep builds every partition's plan at once: a shape whose plans' buffers would take
        # more than half the GPU's memory is drawn again (as one of too many waves).
        return T if 2 ** (T - 1) * M * N * per_element < memory / 2 else args.max_waves + 1

    shapes = heldout.draw_shapes(seed, args.shapes, waves_of, max_waves=args.max_waves)
    print("shapes", shapes, flush=True)
    params = store.model_params(current_gpu_tag())
    print(f"model constants: {params or 'the defaults (no calibration or record for this GPU)'}", flush=True)
    _, cand, _ = measure(world=2, primitives=args.primitives, shapes=shapes, candidates_limit=2 ** (args.max_waves - 1),
                         comm_sms=args.comm_sms, model_kw=params, graphs=False)
    per_shape, overall = heldout.summarize(cand)
    write_result(per_shape, args.out, world_size=2, link="emulated (loopback, copy engine)", seed=seed,
                 comm_sms=args.comm_sms, model_params=params, **{f"overall_{k}": v for k, v in overall.items()})
    print(per_shape.round(4).to_string(index=False))
    print(heldout.overall_line(overall))


if __name__ == "__main__":
    main()
