"""Two source trees' Hopper GEMMs compared on the LLM shapes: the benchmark of each tree
(``scripts/bench/bench_gemm_sm90_llm.py``) run in alternating processes, A B A B ..., each against
cuBLAS in its own interleaved rounds; the trees compare through those ratios
(:func:`fo_lib.experiments.gemm_llm.ab_compare`). Autotuning is off (``FO_SM90_AUTOTUNE=0``), so both
trees run the tile table's picks and a kernel change is what differs; run ``i`` uses seed ``i``.

Tree A is typically an export of an earlier commit (``git archive <sha> | tar -x -C ab_old``), B this
one. Writes each run's CSV, ``runs.csv`` (each run's geomean, median, worst) and ``shapes.csv``
(per shape: each tree's median cuBLAS / ours and B / A), with provenance; prints both.

    python scripts/bench/ab_sm90_llm.py --a ab_old --b . --pairs 2 --rounds 10 --out-dir /tmp/ab
    python scripts/bench/ab_sm90_llm.py --a ab_old --b . --only 0 5 9 --out-dir /tmp/ab
    python scripts/bench/ab_sm90_llm.py --a . --b . --b-options=-DFO_SM90_COOP_DEPTH1=1 --out-dir /tmp/ab
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

BENCH = Path("scripts/bench/bench_gemm_sm90_llm.py")


def run_commands(a: Path, b: Path, pairs: int, rounds: int, out_dir: Path, only=None):
    """(tree label, working directory, command, CSV) per run, in run order: A, B, A, B, ..."""
    runs = []
    for i in range(2 * pairs):
        tree, label = (a, "a") if i % 2 == 0 else (b, "b")
        csv = out_dir / f"run{i}_{label}.csv"
        cmd = [sys.executable, str(BENCH), "--out", str(csv.resolve()), "--rounds", str(rounds),
               "--no-cluster", "--seed", str(i)]
        if only:
            cmd += ["--only", *map(str, only)]
        runs.append((label, tree, cmd, csv))
    return runs


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--a", type=Path, required=True, help="tree A (a directory with fo_lib and scripts)")
    p.add_argument("--b", type=Path, default=Path("."), help="tree B (default this one)")
    p.add_argument("--b-options", default="",
                   help="FO_NVRTC_OPTIONS for tree B's runs only (e.g. an experiment's -DNAME=1; --b . then "
                        "compares the option against this tree without it)")
    p.add_argument("--pairs", type=int, default=2, help="A-B pairs of processes")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--only", type=int, nargs="*", help="indices into the benchmark's shapes")
    p.add_argument("--out-dir", type=Path, required=True)
    args = p.parse_args(argv)
    for tree in (args.a, args.b):
        if not (tree / BENCH).is_file():
            p.error(f"{tree} has no {BENCH}")
    if args.pairs < 1 or args.rounds < 1:
        p.error("--pairs and --rounds must be at least 1")
    import pandas as pd

    from fo_lib.experiments.gemm_llm import ab_compare
    from fo_lib.provenance import write_result

    args.out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FO_SM90_AUTOTUNE="0")
    done = []
    for label, tree, cmd, csv in run_commands(args.a, args.b, args.pairs, args.rounds, args.out_dir, args.only):
        print(f"--- run {len(done)}: tree {label} ({tree})", flush=True)
        run_env = dict(env, PYTHONPATH=str(tree.resolve()), FO_NVRTC_OPTIONS=args.b_options if label == "b" else "")
        subprocess.run(cmd, cwd=tree, env=run_env, check=True)
        done.append((label, pd.read_csv(csv)))
    per_run, shapes = ab_compare(done)
    meta = dict(a=str(args.a), b=str(args.b), b_options=args.b_options, pairs=args.pairs, rounds=args.rounds,
                autotune=False)
    write_result(per_run, args.out_dir / "runs.csv", **meta)
    write_result(shapes, args.out_dir / "shapes.csv", **meta)
    with pd.option_context("display.width", 160, "display.max_rows", 100):
        print(shapes.to_string(index=False))
        print(per_run.to_string(index=False))
    ga = per_run[per_run.tree == "a"].geomean.median()
    gb = per_run[per_run.tree == "b"].geomean.median()
    print(f"cuBLAS / ours geomean, median over runs: A {ga:.4f}, B {gb:.4f} (B / A {gb / ga:.4f}); "
          f"per-shape B / A median {shapes.b_over_a.median():.4f}, min {shapes.b_over_a.min():.4f}")


if __name__ == "__main__":
    main()
