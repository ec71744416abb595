"""Host time per eager overlapped call, two source trees side by side (e.g. before and after a
change of the engine's structure), on one GPU over the loopback link.

    git archive <base> | tar -x -C .baseline         # the tree to compare with
    python3 scripts/bench/bench_engine_host.py --roots .baseline . --out data/h200/engine_host_time.csv

Each round runs every tree once in its own process (a random tree order per round); a process
builds AllReduce plans for a few shapes, with the communication side replayed as captured graphs
(the default) and group by group, and times enqueueing calls while the GPU is busy
(:func:`fo_lib.testing.host_and_gpu_time`). Reports medians over rounds and each tree's ratio to
the first; writes one row per (tree, round, shape, mode).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ((2048, 8192, 8192), (4096, 8192, 8192), (8192, 8192, 4096))

WORKER = r"""
import json, sys
import torch
from fo_lib.comm.loopback import LoopbackCommunicator
from fo_lib.engine import OverlapPlan
from fo_lib.testing import host_and_gpu_time

rows = []
comm = LoopbackCommunicator(2)
for M, N, K in json.loads(sys.argv[1]):
    a = torch.randn(M, K, device="cuda").bfloat16()
    b = torch.randn(N, K, device="cuda").bfloat16()
    for mode, comm_graph in (("comm_graph", True), ("group_by_group", False)):
        plan = OverlapPlan("all_reduce", M, N, K, comm, comm_graph=comm_graph)
        plan.run(a, b)
        host_us, gpu_ms = host_and_gpu_time(lambda: plan.run(a, b), calls=20, rounds=5)
        plan.check()
        rows.append(dict(M=M, N=N, K=K, mode=mode, groups=plan.num_groups, host_us=host_us, gpu_ms=gpu_ms))
        del plan
print("ROWS " + json.dumps(rows))
"""


def measure(root: Path, shapes) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(root.resolve()))
    proc = subprocess.run([sys.executable, "-c", WORKER, json.dumps(shapes)], capture_output=True, text=True,
                          env=env, cwd=str(root), timeout=600)
    if proc.returncode:
        raise RuntimeError(f"{root}: the worker failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("ROWS "))
    return json.loads(line[5:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--roots", nargs="+", type=Path, required=True, help="source trees; ratios are to the first")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    for root in args.roots:
        if not (root / "fo_lib" / "__init__.py").exists():
            ap.error(f"{root} holds no fo_lib/ source tree")
    import pandas as pd

    rng = random.Random(args.seed)
    rows = []
    for r in range(args.rounds):
        order = list(args.roots)
        rng.shuffle(order)
        for root in order:
            for row in measure(root, SHAPES):
                rows.append(dict(tree=str(root), round=r, **row))
            print(f"round {r + 1}/{args.rounds}: {root} done", flush=True)
    df = pd.DataFrame(rows)
    med = df.groupby(["M", "N", "K", "mode", "tree"], sort=False).host_us.median().unstack("tree")
    med = med[[str(r) for r in args.roots]]
    for col in med.columns[1:]:
        med[f"{col} / {med.columns[0]}"] = med[col] / med[med.columns[0]]
    print("host us per eager call, median over rounds:")
    print(med.round(3).to_string())
    if args.out:
        sys.path.insert(0, str(ROOT))
        from fo_lib.provenance import write_result
        write_result(df, args.out, link="emulated", world_size=2,
                     command="python3 scripts/bench/bench_engine_host.py " + " ".join(argv or sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
