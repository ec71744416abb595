"""Two source trees' Hopper GEMMs compared on the LLM shapes: the benchmark of each tree
(``scripts/bench/bench_gemm_sm90_llm.py``) run in alternating processes, A B A B ..., each against
cuBLAS in its own interleaved rounds; the trees compare through those ratios
(:func:`fo_lib.experiments.gemm_llm.ab_compare`). Autotuning is off (``FO_SM90_AUTOTUNE=0``): each
tree runs its own tile table's picks (the same picks where both carry the same table, so that a kernel
change is what differs); with ``--autotune`` it is on, to compare two ways of tuning (each tree's
first run tunes, its later runs read the tunings from the disk cache, as a second process would).
The two runs of pair ``i`` use seed ``i``.

Tree A is typically an export of an earlier commit (``git archive <sha> | tar -x -C .baseline``), B this
one; or both this tree, B with an NVRTC option (``--b-options=-DNAME=1``: with ``=``, as the value
starts with ``-``; a ``-D`` name that no header of tree B mentions is refused). Writes each run's CSV,
``runs.csv`` (each run's geomean, median, worst) and ``shapes.csv`` (per shape: each tree's median
cuBLAS / ours and B / A), with provenance; prints both.

    python scripts/bench/ab_sm90_llm.py --a .baseline --b . --pairs 2 --rounds 10 --out-dir /tmp/ab
    python scripts/bench/ab_sm90_llm.py --a . --b . --b-options=-DNAME=1 --only 0 5 9 --out-dir /tmp/ab
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

BENCH = Path("scripts/bench/bench_gemm_sm90_llm.py")


def run_commands(a: Path, b: Path, pairs: int, rounds: int, out_dir: Path, only=None, b_options: str = "",
                 autotune: bool = False):
    """(tree label, working directory, command, environment overrides, CSV) per run, in run order
    A, B, A, B, ...: the two runs of pair i take seed i; only tree B's runs get ``b_options`` as
    ``FO_NVRTC_OPTIONS`` (tree A's run without any)."""
    runs = []
    for i in range(2 * pairs):
        tree, label = (a, "a") if i % 2 == 0 else (b, "b")
        csv = out_dir / f"run{i}_{label}.csv"
        cmd = [sys.executable, str(BENCH), "--out", str(csv.resolve()), "--rounds", str(rounds),
               "--no-cluster", "--seed", str(i // 2)]
        if only:
            cmd += ["--only", *map(str, only)]
        env = dict(FO_SM90_AUTOTUNE="1" if autotune else "0", PYTHONPATH=str(tree.resolve()),
                   FO_NVRTC_OPTIONS=b_options if label == "b" else "")
        runs.append((label, tree, cmd, env, csv))
    return runs


def unknown_macros(options: str, tree: Path) -> list[str]:
    """The ``-DNAME`` of ``options`` that no header under ``tree/fo_lib/cuda`` mentions."""
    text = "".join(p.read_text() for p in sorted((tree / "fo_lib" / "cuda").glob("*.cuh")))
    names = [re.match(r"-D([A-Za-z_]\w*)", o).group(1) for o in shlex.split(options) if re.match(r"-D[A-Za-z_]", o)]
    return [n for n in names if not re.search(rf"\b{n}\b", text)]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--a", type=Path, required=True, help="tree A (a directory with fo_lib and scripts)")
    p.add_argument("--b", type=Path, default=Path("."), help="tree B (default this one)")
    p.add_argument("--b-options", default="",
                   help="FO_NVRTC_OPTIONS for tree B's runs only, written --b-options=-DNAME=1 (--b . then "
                        "compares the option against this tree without it)")
    p.add_argument("--pairs", type=int, default=2, help="A-B pairs of processes")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--only", type=int, nargs="*", help="indices into the benchmark's shapes")
    p.add_argument("--autotune", action="store_true", help="autotuning on in both trees (default off)")
    p.add_argument("--out-dir", type=Path, required=True)
    args = p.parse_args(argv)
    for tree in (args.a, args.b):
        if not (tree / BENCH).is_file():
            p.error(f"{tree} has no {BENCH}")
    if args.pairs < 1 or args.rounds < 1:
        p.error("--pairs and --rounds must be at least 1")
    missing = unknown_macros(args.b_options, args.b)
    if missing:
        p.error(f"--b-options: no header of {args.b}/fo_lib/cuda mentions {', '.join(missing)}")
    import pandas as pd

    from fo_lib.experiments.gemm_llm import ab_compare
    from fo_lib.provenance import write_result

    args.out_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for label, tree, cmd, env, csv in run_commands(args.a, args.b, args.pairs, args.rounds, args.out_dir,
                                                   args.only, args.b_options, args.autotune):
        print(f"--- run {len(done)}: tree {label} ({tree})", flush=True)
        if subprocess.run(cmd, cwd=tree, env=dict(os.environ, **env)).returncode != 0:
            print(f"run {len(done)} (tree {label}) failed: comparing the runs before it", flush=True)
            break
        done.append((label, pd.read_csv(csv)))
    if {t for t, _ in done} != {"a", "b"}:
        sys.exit("ab_sm90_llm: no complete run of both trees")
    per_run, shapes = ab_compare(done)
    meta = dict(a=str(args.a), b=str(args.b), b_options=args.b_options, pairs=args.pairs, rounds=args.rounds,
                runs_done=len(done), autotune=args.autotune)
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
