"""The parts of sm90_protocol_sim.py's model below its processes: an mbarrier (count, pending arrivals,
tx count, completed phases n; try_wait.parity(P) true iff n % 2 != P), a protocol violation, and each
CTA's units of work as the kernel walks them: ``units`` gives (tile, first k-block, end k-block, kind,
data-parallel tiles, split, stream-K tiles) per unit, the kinds whole tiles and stream-K heads, tails,
parked tails, their finish and split parts."""

KWHOLE, KHEAD, KTAIL, KPARK, KFIN, KSPLIT = 0, 1, 2, 3, 4, 5


class Viol(Exception):
    pass


class Bar:
    def __init__(s, count, name):
        s.count, s.pending, s.tx, s.n, s.name = count, count, 0, 0, name

    def _maybe(s):
        if s.pending == 0 and s.tx == 0:
            s.n += 1
            s.pending = s.count

    def arrive(s, k=1):
        s.pending -= k
        if s.pending < 0:
            raise Viol(f"{s.name}: too many arrivals")
        s._maybe()

    def expect_tx(s, b):
        s.tx += b
        s.arrive()

    def complete_tx(s, b):
        s.tx -= b
        s._maybe()

    def ok(s, P):
        return s.n % 2 != P


def units(b, P, tiles, sk_tiles, sk_split, KT, cluster, bounds=None):
    split = 0
    if cluster > 1:
        sk_tiles = 0
    elif sk_split >= 2:
        if 0 < sk_tiles < P and sk_tiles * sk_split <= P and sk_split <= KT:
            split = sk_split
        else:
            sk_tiles = 0
    elif sk_tiles < P or sk_tiles >= 2 * P:
        sk_tiles = 0
    sk = sk_tiles
    dp = (tiles + 1) & ~1 if cluster > 1 else tiles - sk_tiles
    out = []
    s = b
    while s < dp:
        out.append((s, 0, KT, KWHOLE, dp, split, sk))
        s += P
    if split:
        if b < sk * split:
            j = b // sk
            out.append((dp + (b - j * sk), j * KT // split, (j + 1) * KT // split, KHEAD if j + 1 < split else KSPLIT,
                        dp, split, sk))
        return out
    total = sk_tiles * KT
    g0, g1 = (bounds[b], bounds[b + 1]) if bounds and total else (total * b // P, total * (b + 1) // P)
    t_end = g1 // KT
    head_len = g1 - t_end * KT
    t_tail = g0 // KT
    tail_k0 = g0 - t_tail * KT
    t_whole = t_tail + 1 if tail_k0 else t_tail
    park = tail_k0 != 0 and head_len + (KT - tail_k0) < tail_k0
    if head_len:
        out.append((dp + t_end, 0, head_len, KHEAD, dp, split, sk))
    if tail_k0:
        out.append((dp + t_tail, tail_k0, KT, KPARK if park else KTAIL, dp, split, sk))
    for t in range(t_whole, t_end):
        out.append((dp + t, 0, KT, KWHOLE, dp, split, sk))
    if park:
        out.append((dp + t_tail, KT, KT, KFIN, dp, split, sk))
    return out


def unequal_runs(rng, P, total, KT):
    """Random run bounds as the host may give them: P runs of at least KT k-blocks covering ``total``."""
    cuts = sorted(rng.randint(0, total - P * KT) for _ in range(P - 1))
    return [0] + [c + (i + 1) * KT for i, c in enumerate(cuts)] + [total]
