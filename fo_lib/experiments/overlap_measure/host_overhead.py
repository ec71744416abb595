"""The host cost of an overlapped call (GPU): the time to enqueue it three ways, and the GPU time
per call of each."""
from __future__ import annotations

import pandas as pd

from ..measure_common import benchmark_routing, link_label


def host_overhead(comm=None, *, world: int = 2, shapes=((2048, 4096, 1024), (4096, 8192, 4096)),
                  primitives=("all_reduce", "reduce_scatter", "all_to_all"), calls: int = 30, rounds: int = 5):
    """Host time to enqueue one overlapped call three ways, and the GPU time per call of each
    (:func:`fo_lib.testing.host_and_gpu_time`): ``per_group`` (``comm_graph=False``: a launch per
    wait and a call per collective), ``eager`` (``plan.run`` with the communication side replayed as
    one captured graph, the default) and ``graph`` (``plan.capture``: the whole call, one replay)."""
    import torch

    from ... import gemm
    from ...engine import OverlapPlan
    from ...testing import host_and_gpu_time

    if comm is None:
        from ...comm.loopback import LoopbackCommunicator
        comm = LoopbackCommunicator(world)
    sms = gemm.sm_count()
    rows = []
    for prim in primitives:
        for M, N, K in shapes:
            cfg = gemm.auto_config(M, N, K, sms)
            routing = benchmark_routing(M, N, K, comm.world_size) if prim == "all_to_all" else None
            plan = OverlapPlan(prim, M, N, K, comm, config=cfg, routing=routing)
            per_group = OverlapPlan(prim, M, N, K, comm, config=cfg, routing=routing, comm_graph=False)
            a = torch.randn(M, K, device="cuda").bfloat16()
            b = torch.randn(N, K, device="cuda").bfloat16()
            graphed = plan.capture(a, b)
            variants = {"per_group": lambda: per_group.run(a, b), "eager": lambda: plan.run(a, b), "graph": graphed}
            res = {name: host_and_gpu_time(fn, calls=calls, rounds=rounds) for name, fn in variants.items()}
            plan.check()
            per_group.check()
            rows.append(dict(primitive=prim, M=M, N=N, K=K, groups=plan.num_groups, link=link_label(comm),
                             comm_graph=plan.comm_graph_active,
                             **{f"{v}_host_us": res[v][0] for v in variants}, **{f"{v}_ms": res[v][1] for v in variants}))
    return pd.DataFrame(rows)
