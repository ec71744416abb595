"""sm90_protocol_sim.py's model: one random interleaving of gemm_sm90.cuh's consumer protocol
(cooperative and ping-pong; one k-block of MMAs in flight for ping-pong and 4+ stages, as the
kernel's kMmaInFlight).
Processes per CTA: producer, TMA completions (async), consumer WG0, WG1, store warps; cross-CTA
stream-K flags and slots; clusters of 2 (remote arrivals, multicast halves of the shared tile, B
or A: the same bytes and barriers; the phantom unit).
A warpgroup that walks stages without reading them (a phantom unit, a warpgroup without rows) is two
processes: its thread 0 (waits, frees the stage) and its other warps (wait only), which the kernel
makes meet thread 0 before each arrival (walk_bar); ``bug="walk_unsynced"`` drops that, and the model
finds a warp left two phases behind."""
import random

from sm90_protocol_units import KFIN, KHEAD, KPARK, KSPLIT, KTAIL, Bar, Viol, units


def W(cond):  # a wait: yield a predicate
    return cond


def run(P, tiles, KT, STAGES, cluster, pingpong, sk_tiles=0, sk_split=0, seed=0, order_fix=False,
        bug=None, bounds=None, idle_tiles=()):
    """One random interleaving; raises Viol on a protocol violation or a deadlock. ``bug``:
    ``"early_release"`` makes the in-flight consumers free a stage as soon as its MMAs are issued;
    ``"walk_unsynced"``: a walking warpgroup's thread 0 frees each stage without waiting for its other
    warps (the model must find both). ``bounds``: stream-K runs of unequal length (the kernel's sk_bounds).
    ``idle_tiles``: tiles whose second cooperative warpgroup has no rows (it walks their stages without
    MMAs, as for a phantom unit, and still runs the epilogue)."""
    rng = random.Random(seed)
    G = {"flag": {}, "slot": {}}
    ctas = []
    for b in range(P):
        C = {"b": b, "rank": b % cluster}
        C["full"] = [Bar(1, f"cta{b}.full{s}") for s in range(STAGES)]
        C["empty"] = [Bar((1 if pingpong else 2) * cluster, f"cta{b}.empty{s}") for s in range(STAGES)]
        C["c_full"] = Bar(128 if pingpong else 256, f"cta{b}.c_full")
        C["c_empty"] = Bar(96, f"cta{b}.c_empty")
        C["order"] = [Bar(1, f"cta{b}.order{c}") for c in range(2)]
        C["eorder"] = [Bar(1, f"cta{b}.eorder{c}") for c in range(2)]
        C["ring"] = [None] * STAGES        # k-block id whose data is (being) written / present
        C["ring_ready"] = [False] * STAGES
        C["readers"] = [0] * STAGES        # in-flight wgmma reads of a stage
        C["released"] = {}                 # global kblock index -> released by consumer
        C["cbuf"] = None                   # (tile index t, complete?)
        C["c_writers"] = 0
        C["c_readers"] = 0
        C["stored"] = 0                    # tiles whose store-warp reads are complete
        C["units"] = units(b, P, tiles, sk_tiles, sk_split, KT, cluster, bounds)
        C["staged_list"] = [i for i, u in enumerate(C["units"]) if u[0] < tiles and u[3] not in (KHEAD, KPARK)]
        C["walk"] = [[], []]         # per warpgroup: stages (stage, k-block) its other warps still wait on
        C["walk_done"] = [False, False]
        ctas.append(C)
    events = []  # async TMA completions: (cta, stage, bytes, gk)

    def producer(C):
        stage, phase, gk = 0, 0, 0
        for (s, k0, k1, part, dp, split, sk) in C["units"]:
            phantom = s >= tiles
            share = cluster > 1 and not phantom and (s ^ 1) < tiles and ((s >> 1) % 2 == 0)
            for kb in range(k0, k1):
                e = C["empty"][stage]
                yield W(lambda e=e, p=phase: e.ok(p ^ 1))
                # the stage's previous k-block must have been released by every reader
                targets = [C] if not share else [C, ctas[C["b"] ^ 1]]
                for T in targets:
                    if T["readers"][stage]:
                        raise Viol(f"cta{T['b']} stage {stage} refilled while wgmma reads it (gk {gk})")
                    if gk >= STAGES and not T["released"].get(gk - STAGES):
                        raise Viol(f"cta{T['b']} stage {stage} refilled before kblock {gk-STAGES} released")
                if phantom:
                    C["full"][stage].arrive()
                    C["ring"][stage] = ("ph", gk)
                else:
                    C["full"][stage].expect_tx(4)
                    C["ring"][stage] = ("d", gk)
                    if share:
                        events.append((C, stage, 2, gk))  # the unshared tile (A, or B where A is shared)
                        events.append((C, stage, 1, gk))  # own half of the shared tile, to self
                        events.append((ctas[C["b"] ^ 1], stage, 1, gk))  # own half of it, to the partner
                    else:
                        events.append((C, stage, 4, gk))
                stage += 1
                if stage == STAGES:
                    stage, phase = 0, phase ^ 1
                gk += 1
                yield None

    def store(C):
        parity = 0
        t = 0
        for (s, k0, k1, part, dp, split, sk) in C["units"]:
            if s >= tiles or part in (KHEAD, KPARK):
                continue
            yield W(lambda p=parity: C["c_full"].ok(p))
            if C["c_writers"]:
                raise Viol(f"cta{C['b']}: store reads C of tile {t} while a consumer writes it")
            if C["cbuf"] != (t, s, True):
                raise Viol(f"cta{C['b']}: store warps read staged tile #{t} (s={s}) but C holds {C['cbuf']}")
            C["c_readers"] += 1
            for _ in range(rng.randint(1, 4)):
                yield None
                if C["cbuf"] != (t, s, True):
                    raise Viol(f"cta{C['b']}: C overwritten ({C['cbuf']}) while store warps read tile #{t}")
            C["c_readers"] -= 1
            C["stored"] += 1
            C["c_empty"].arrive(96)
            parity ^= 1
            t += 1
            yield None

    # The kernel's kMmaInFlight: one k-block of MMAs in flight (its stage released a k-block later).
    in_flight = pingpong or STAGES >= 4

    def consumer(C, c):
        stage, phase, c_par, order_par, eorder_par, unit = 0, 0, 0, 0, 0, -1
        tcount = 0  # staged tiles so far (both WGs), for checks
        b = C["b"]
        gk = 0

        def free(st):  # one arrival on the stage's empty barrier, in both CTAs of a cluster
            C["empty"][st].arrive()
            if cluster > 1:
                ctas[b ^ 1]["empty"][st].arrive()

        def release(st, g, reading=True):  # this warpgroup's reads of k-block g (in stage st) are done
            if reading:
                C["readers"][st] -= 1
            rel = C.setdefault("rel", {})
            rel[g] = rel.get(g, 0) + 1
            if rel[g] == (1 if pingpong else 2):  # every warpgroup reading the stage
                C["released"][g] = True
            free(st)

        def check_full(what):
            if C["full"][stage].n != gk // STAGES + 1:
                raise Viol(f"cta{b} wg{c}: {what}full[{stage}] n={C['full'][stage].n} for kblock {gk}")

        def walk_meet():  # the other warps wait on this stage too; the kernel's walk_bar: they meet first
            C["walk"][c].append((stage, gk))
            if bug != "walk_unsynced":
                yield W(lambda: not C["walk"][c])

        def step():  # on to the next k-block and stage
            nonlocal stage, phase, gk
            stage += 1
            if stage == STAGES:
                stage, phase = 0, phase ^ 1
            gk += 1

        for ui, (s, k0, k1, part, dp, split, sk) in enumerate(C["units"]):
            unit += 1
            stages_c = s < tiles and part not in (KHEAD, KPARK)
            nkb = k1 - k0
            if pingpong and (unit & 1) != c:
                pos = stage + nkb
                phase ^= (pos // STAGES) & 1
                stage = pos % STAGES
                c_par ^= int(stages_c)
                tcount += int(stages_c)
                gk += nkb
                continue
            if pingpong and unit > 0:
                yield W(lambda p=order_par: C["order"][c].ok(p))
                order_par ^= 1
            phantom = s >= tiles
            idle = phantom or (not pingpong and c == 1 and s in idle_tiles)
            if in_flight:
                nk = 0 if idle else nkb
                prev, prevg = stage, gk
                for i in range(nk):
                    yield W(lambda st=stage, p=phase: C["full"][st].ok(p))
                    if C["ring"][stage] != ("d", gk):
                        raise Viol(f"cta{b} wg{c}: kblock {gk} reads stage {stage} holding {C['ring'][stage]}")
                    check_full("")
                    C["readers"][stage] += 1
                    yield None
                    if bug == "early_release":  # arrive on the stage just issued, before its MMAs are done
                        release(stage, gk, reading=False)
                        if i > 0:
                            C["readers"][prev] -= 1
                    elif i > 0:  # wait_group 1: the previous k-block's reads are done
                        release(prev, prevg)
                    prev, prevg = stage, gk
                    step()
                    yield None
                if nk > 0:
                    if bug == "early_release":
                        C["readers"][prev] -= 1
                    else:
                        release(prev, prevg)
                if idle:
                    for kb in range(k0, k1):
                        yield W(lambda st=stage, p=phase: C["full"][st].ok(p))
                        check_full("phantom ")
                        yield from walk_meet()
                        release(stage, gk, reading=False)
                        step()
                if pingpong:
                    C["order"][c ^ 1].arrive()
            else:
                for kb in range(k0, k1):
                    yield W(lambda st=stage, p=phase: C["full"][st].ok(p))
                    check_full("")
                    if not idle:
                        C["readers"][stage] += 1
                        yield None
                    else:
                        yield from walk_meet()
                    release(stage, gk, reading=not idle)
                    step()
            if pingpong and order_fix and unit > 0:
                yield W(lambda p=eorder_par: C["eorder"][c].ok(p))
                eorder_par ^= 1
            if phantom:
                if pingpong and order_fix:
                    C["eorder"][c ^ 1].arrive()
                continue
            for _ in range(rng.randint(0, 3)):
                yield None
            half = c if not pingpong else None
            if part in (KHEAD, KPARK):
                i = 2 * b + (part == KPARK)
                G["slot"][(i, half)] = ("part", s, k0, k1)
                if part == KHEAD:
                    if not pingpong:
                        # bar.sync of both WGs; model: the flag is released when both WGs wrote
                        G.setdefault("headw", {}).setdefault((b, s), 0)
                        G["headw"][(b, s)] += 1
                        yield W(lambda: G["headw"][(b, s)] == 2)
                        if c == 0:
                            G["flag"][s - dp] = G["flag"].get(s - dp, 0) + 1
                    else:
                        G["flag"][s - dp] = G["flag"].get(s - dp, 0) + 1
                if pingpong and order_fix:
                    C["eorder"][c ^ 1].arrive()
                continue
            if part == KSPLIT:
                yield W(lambda: G["flag"].get(s - dp, 0) == split - 1)
                for i in range(1, split):
                    v = G["slot"].get((2 * (b - i * sk), half))
                    if v is None or v[1] != s:
                        raise Viol(f"cta{b}: split part {i} of tile {s} missing ({v})")
            if part in (KTAIL, KFIN):
                if part == KFIN:
                    v = G["slot"].get((2 * b + 1, half))
                    if v is None or v[1] != s:
                        raise Viol(f"cta{b} wg{c}: parked tail of tile {s} not written yet ({v})")
                yield W(lambda: G["flag"].get(s - dp, 0) != 0)
                v = G["slot"].get((2 * (b - 1), half))
                if v is None or v[1] != s:
                    raise Viol(f"cta{b}: head of tile {s} missing ({v})")
            # epilogue
            yield W(lambda p=c_par: C["c_empty"].ok(p ^ 1))
            if pingpong:
                t = tcount
                if C["stored"] != t:
                    raise Viol(f"cta{b} wg{c}: stages C tile #{t} (unit {unit}) but only {C['stored']} stored "
                               f"(c_empty n={C['c_empty'].n})")
                if C["c_readers"] or C["c_writers"]:
                    raise Viol(f"cta{b} wg{c}: C written during another access")
                C["c_writers"] += 1
                C["cbuf"] = (t, s, False)
                for _ in range(rng.randint(1, 3)):
                    yield None
                    if C["cbuf"] != (t, s, False) or C["c_readers"]:
                        raise Viol(f"cta{b} wg{c}: C tile #{t} clobbered during staging")
                C["cbuf"] = (t, s, True)
                C["c_writers"] -= 1
                C["c_full"].arrive(128)
                if order_fix:
                    C["eorder"][c ^ 1].arrive()
            else:
                t = tcount
                if C["stored"] != t:
                    raise Viol(f"cta{b} wg{c}: coop stages tile #{t} but {C['stored']} stored")
                C.setdefault("half", {}).setdefault(t, 0)
                C["half"][t] += 1
                C["cbuf"] = (t, s, C["half"][t] == 2)
                C["c_full"].arrive(128)
            c_par ^= 1
            tcount += 1
        C["walk_done"][c] = True

    def walk_warps(C, c):  # warps 1-3 of a warpgroup that walks stages: each wait, in order, maybe late
        q = C["walk"][c]
        while True:
            yield W(lambda: q or C["walk_done"][c])
            if not q:
                return
            st, g = q[0]
            want = g // STAGES + 1  # the full barrier's completed phases when k-block g is in stage st
            yield W(lambda st=st, want=want: C["full"][st].n >= want)
            if C["full"][st].n != want:
                raise Viol(f"cta{C['b']} wg{c}: a walking warp two phases behind on full[{st}] "
                           f"(n={C['full'][st].n} for kblock {g})")
            q.pop(0)

    procs = []
    for C in ctas:
        procs.append([f"cta{C['b']}.prod", producer(C), None, rng.uniform(0.2, 1)])
        procs.append([f"cta{C['b']}.store", store(C), None, rng.uniform(0.02, 1)])
        procs.append([f"cta{C['b']}.wg0", consumer(C, 0), None, rng.uniform(0.2, 1)])
        procs.append([f"cta{C['b']}.wg1", consumer(C, 1), None, rng.uniform(0.2, 1)])
        for c in range(2):
            procs.append([f"cta{C['b']}.wg{c}.walk", walk_warps(C, c), None, rng.uniform(0.02, 1)])
    steps = 0
    while True:
        steps += 1
        runnable = [p for p in procs if p[1] is not None and (p[2] is None or p[2]())]
        choices = runnable + (["ev"] if events else [])
        if not choices:
            live = [p[0] for p in procs if p[1] is not None]
            if live:
                raise Viol(f"deadlock: {live}")
            return steps
        weights = [p[3] for p in runnable] + ([1.0] if events else [])
        pick = rng.choices(choices, weights)[0]
        if pick == "ev":
            i = rng.randrange(len(events))
            T, st, byts, gk = events.pop(i)
            T["full"][st].complete_tx(byts)
            continue
        try:
            pick[2] = next(pick[1])
        except StopIteration:
            pick[1] = None
