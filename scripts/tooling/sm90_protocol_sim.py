"""Random-interleaving simulation of gemm_sm90.cuh's consumer protocol (cooperative and ping-pong; one
k-block of MMAs in flight for ping-pong and 4+ stages, as the kernel's kMmaInFlight): RUNS random
configurations (CTAs, tiles, k-blocks, stages, clusters, stream-K runs and splits, warpgroups without
rows), each in one random interleaving, its violations and deadlocks counted by kind. The processes
are in sm90_protocol_model.py, the mbarriers and each CTA's units of work in sm90_protocol_units.py.
``order_fix`` (argument ``fix``) is the kernel's epi[c] barriers (C tiles staged in unit order); without
them ping-pong races on the C staging buffer, which the model finds (tests/test_sm90_protocol_sim.py).

    python scripts/tooling/sm90_protocol_sim.py 3000 fix
"""
import argparse
import random
import sys
from pathlib import Path

# The model's modules sit beside this script, whose folder is not on sys.path when a test loads it by path.
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from sm90_protocol_model import run  # noqa: E402
from sm90_protocol_units import Viol, unequal_runs, units  # noqa: E402

__all__ = ["Viol", "main", "run", "units"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=int, nargs="?", default=2000, help="random configurations to run (default 2000)")
    ap.add_argument("fix", nargs="?", choices=["fix"], help="with the kernel's epi[c] barriers (order_fix)")
    args = ap.parse_args()
    n, fix = args.runs, args.fix == "fix"
    fails = {}
    rng = random.Random(1)
    for it in range(n):
        pp = rng.random() < 0.8
        cluster = rng.choice([1, 2])
        P = rng.choice([1, 2, 3, 4, 6]) if cluster == 1 else rng.choice([2, 4, 6])
        KT = rng.choice([1, 1, 2, 3, 5, 8])
        STAGES = rng.choice([2, 3, 4, 5])
        tiles = rng.randint(1, 5 * P)
        sk_tiles, sk_split = 0, 0
        if cluster == 1 and rng.random() < 0.5:
            if rng.random() < 0.5:
                sk_split = 1
                sk_tiles = rng.randint(P, 2 * P - 1)
                tiles = max(tiles, sk_tiles)
            else:
                sk_split = rng.randint(2, 3)
                sk_tiles = rng.randint(1, max(1, P // sk_split))
                tiles = max(tiles, sk_tiles + 1)
        args = dict(P=P, tiles=tiles, KT=KT, STAGES=STAGES, cluster=cluster, pingpong=pp, sk_tiles=sk_tiles,
                    sk_split=sk_split, seed=it, order_fix=fix)
        if sk_split == 1 and rng.random() < 0.5:
            args["bounds"] = unequal_runs(rng, P, sk_tiles * KT, KT)
        if rng.random() < 0.5:  # a last tile row whose second warpgroup has no rows
            args["idle_tiles"] = set(rng.sample(range(tiles), rng.randint(1, tiles)))
        try:
            run(**args)
        except Viol as e:
            key = ("pp" if pp else "coop") + " " + str(e).split(" (")[0].split("#")[0][:70]
            fails.setdefault(key, []).append((args, str(e)))
    for k, v in sorted(fails.items(), key=lambda kv: -len(kv[1])):
        print(len(v), k)
        print("    e.g.", v[0][0], "|", v[0][1])
    print("runs", n, "failing", sum(len(v) for v in fails.values()))


if __name__ == "__main__":
    main()
