"""What the overlap engine's GPU test files share: bf16 inputs with their float64 product, the result
a plan must give on identical loopback ranks, and the tolerance."""
import numpy as np
import torch

TOL = 2e-2


def inputs(M, N, K, seed):
    """Random bf16 operands A (M x K), B (N x K) and their float64 product A B^T."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
    b = torch.randn(N, K, device="cuda", generator=g).bfloat16()
    return a, b, a.double() @ b.double().T


def expected(plan, C, W):
    """What ``plan`` returns on ``W`` identical virtual ranks whose GEMM result is ``C``."""
    if plan.primitive == "all_reduce":
        return W * C
    if plan.primitive == "reduce_scatter":
        return W * C[torch.from_numpy(plan.owned_rows).cuda()]
    out = torch.zeros(plan.out_rows, C.shape[1], dtype=torch.float64, device="cuda")
    for s in range(W):  # identical virtual ranks: every source sends the same rows
        m = plan.routing.dest[s] == plan.comm.rank
        out[torch.from_numpy(plan.routing.dst_index[s][m]).cuda()] = C[torch.from_numpy(np.flatnonzero(m)).cuda()]
    return out
