"""Fig. 12's layers on fo_lib's modules, each beside the same layer without overlap and a float64
reference: a Llama-style tensor-parallel transformer block and a Mixtral-style MoE combine step.

**Dense block** (Llama 3, tensor parallel over ``W`` ranks; every rank holds all ``T`` tokens)::

    qkv    = x @ Wqkv_r^T                     column-parallel (this rank's heads): torch.matmul, no communication
    a      = attention(qkv)                    this rank's heads (see below)
    n, h1  = RMSNorm_post(AllReduce(a @ Wo_r^T) + residual)   RowParallelLinear, fused add + norm
    g, u   = n @ Wgu_r^T                       column-parallel gate and up: torch.matmul
    y, h2  = RMSNorm_next(AllReduce((silu(g) * u) @ Wd_r^T) + h1)  RowParallelLinear, fused add + norm

The block takes the normed input ``x`` and the residual stream and returns both for the next block
(the fused add + RMSNorm of vLLM: the norm after the MLP is the next block's input norm), so each
row-parallel projection is one overlapped GEMM + AllReduce whose post-reorder adds the residual,
stores the pre-norm sum (``residual_out``) and normalises. The baseline is the same block with
``torch.matmul``, one ``comm.all_reduce`` per projection, the residual add and ``torch``'s
``rms_norm``; everything else is the same code and the same weights.

Attention is ``scaled_dot_product_attention`` (causal, grouped-query) on this rank's heads, without
rotary embeddings, KV cache or batching (one sequence of ``T`` tokens); ``attention="self"`` is a
stand-in where each token attends only to itself (a query head's output is its group's V row). The
paper's Fig. 12 reports whole models; here one layer is timed, attention included, which runs alike
in both paths.

**MoE combine step** (Mixtral, expert parallel over ``W`` ranks, ``T / W`` home tokens per rank)::

    recv = AllToAll(rows @ We^T, routing)      MoECombine: this rank's expert rows back to their tokens
    y    = RMSNorm(sum_k gate[t, k] * recv[t * top_k + k] + residual)         torch, both paths

``rows`` (``T / W * top_k`` per rank, the experts' activations; a rank's experts run as one GEMM)
go to their tokens' home ranks by a balanced routing (each rank sends ``1 / W`` of its rows to every
rank; shuffled receive slots), so every rank gets back the ``top_k`` contributions of its tokens.
The baseline is :func:`fo_lib.baselines.sequential` (matmul, one All-to-All, placement). Not in the
step: the router, the dispatch All-to-All, the experts' gate/up, tensor parallelism inside an expert.

On communicators of identical virtual ranks (``link == "emulated"``: the loopbacks) every rank holds
rank 0's data, so the reference sums ``W`` equal shards; on real ranks each rank's shard is seeded by
its rank and every rank can rebuild every shard for the reference.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..baselines import matmul

EPS = 1e-5  # Llama 3 and Mixtral's RMSNorm epsilon
ATTENTION = ("sdpa", "self")
SPLITS = {"hidden": "tensor parallelism splits the hidden size over the ranks, as Megatron does",
          "intermediate": "each rank holds intermediate / W MLP columns", "heads": "each rank holds heads / W",
          "kv_heads": "each rank holds kv_heads / W", "tokens": "each rank is home to tokens / W",
          "experts": "each rank holds experts / W"}


@dataclasses.dataclass(frozen=True)
class BlockShape:
    """One layer of Table 4. ``tokens``: the tokens of the layer's GEMMs over all ranks (a TP block's
    every rank holds all of them; an EP step's rank holds ``tokens / W`` at home). ``experts`` > 0
    makes it an MoE combine step (``intermediate`` is then one expert's width)."""

    layer: str
    tokens: int
    hidden: int
    intermediate: int
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 128
    experts: int = 0
    top_k: int = 0
    world: int = 8  # the paper's parallel degree (Table 4): the default world of a measurement

    @property
    def moe(self) -> bool:
        return self.experts > 0

    def local(self, world: int) -> dict:
        """This rank's sizes at ``world`` ranks; a size that does not split raises one ValueError."""
        if isinstance(world, bool) or not isinstance(world, (int, np.integer)) or world < 1:
            raise ValueError(f"world size must be a positive integer, got {world!r}")
        W = int(world)
        for name in ("tokens", "experts") if self.moe else ("hidden", "intermediate", "heads", "kv_heads"):
            if getattr(self, name) % W:
                raise ValueError(f"{self.layer}: {name} {getattr(self, name)} does not split over {W} ranks "
                                 f"({SPLITS[name]}); choose a world size that divides it")
        if self.moe:
            home, rows = self.tokens // W, self.tokens // W * self.top_k
            if not 1 <= self.top_k <= self.experts or rows % W:
                raise ValueError(f"{self.layer}: {rows} expert rows per rank (tokens / W x top_k) do not split "
                                 f"evenly over {W} ranks (top_k {self.top_k} of {self.experts} experts)")
            return dict(home=home, rows=rows, k=self.intermediate)
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.layer}: heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        hq, hkv, inter = self.heads // W, self.kv_heads // W, self.intermediate // W
        for name, k in (("attention output (heads / W x head_dim)", hq * self.head_dim), ("intermediate / W", inter)):
            if k % 8:
                raise ValueError(f"{self.layer}: the {name} GEMM's K = {k} at W = {W} is not a multiple of 8")
        return dict(hq=hq, hkv=hkv, inter=inter)


# --- weights and inputs from a seed ---------------------------------------------------------------
def identical_ranks(comm) -> bool:
    """The loopbacks' ranks hold identical data (``fo_lib.comm.virtual``): every rank is rank 0."""
    return comm.link == "emulated"


def _gen(device, seed: int, rank: int, salt: int):
    import torch

    # rank -1: replicated tensors (inputs, norms), the same on every rank.
    state = np.random.SeedSequence([seed, rank + 1, salt]).generate_state(1)[0]
    return torch.Generator(device=device).manual_seed(int(state))


def _randn(shape, std, device, dtype, seed, rank, salt):
    import torch

    g = _gen(device, seed, rank, salt)
    return (torch.randn(shape, generator=g, device=device, dtype=torch.float32) * std).to(dtype)


@dataclasses.dataclass(frozen=True)
class DenseWeights:
    """One rank's shard of a dense block (nn.Linear layout ``[out, in]``) and the replicated norms."""

    qkv: object       # [(hq + 2 hkv) * head_dim, hidden]
    o: object         # [hidden, hq * head_dim]
    gate_up: object   # [2 * inter, hidden]
    down: object      # [hidden, inter]
    norm_post: object  # [hidden]
    norm_next: object  # [hidden]


def dense_weights(shape: BlockShape, world: int, rank: int, seed: int, device, dtype) -> DenseWeights:
    """Rank ``rank``'s shard; every fan-in counts all ranks, so the AllReduced sums stay O(1)."""
    loc, H, d = shape.local(world), shape.hidden, shape.head_dim
    hq, hkv, inter = loc["hq"], loc["hkv"], loc["inter"]
    w = dict(qkv=((hq + 2 * hkv) * d, H, H), o=(H, hq * d, hq * d * world), gate_up=(2 * inter, H, H),
             down=(H, inter, inter * world))
    shards = {k: _randn((n, kk), fan ** -0.5, device, dtype, seed, rank, i)
              for i, (k, (n, kk, fan)) in enumerate(w.items())}
    norms = {k: 1 + _randn((H,), 0.1, device, dtype, seed, -1, 10 + i)  # replicated: seeded without the rank
             for i, k in enumerate(("norm_post", "norm_next"))}
    return DenseWeights(**shards, **norms)


def dense_inputs(shape: BlockShape, seed: int, device, dtype):
    """``(x, residual)`` ``[tokens, hidden]``, the same on every rank (tensor parallelism)."""
    return tuple(_randn((shape.tokens, shape.hidden), 1.0, device, dtype, seed, -1, 20 + i) for i in range(2))


# --- the dense block --------------------------------------------------------------------------------
def attend(qkv, hq: int, hkv: int, d: int, mode: str = "sdpa"):
    """This rank's attention output ``[T, hq * d]`` from its ``qkv`` columns."""
    import torch.nn.functional as F

    if mode not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION}, got {mode!r}")
    T = qkv.shape[0]
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=1)
    if mode == "self":
        return v.reshape(T, hkv, 1, d).expand(T, hkv, hq // hkv, d).reshape(T, hq * d)
    q, k, v = (t.reshape(T, n, d).transpose(0, 1) for t, n in ((q, hq), (k, hkv), (v, hkv)))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return out.transpose(0, 1).reshape(T, hq * d)


def _silu_mul(gu):
    import torch.nn.functional as F

    g, u = gu.float().chunk(2, dim=1)
    return (F.silu(g) * u).to(gu.dtype)


def dense_forward(shape: BlockShape, world: int, w: DenseWeights, x, residual, o_proj, down_proj, attention="sdpa"):
    """The block around its two row-parallel projections, ``proj(a, residual) -> (normed, pre_norm)``."""
    loc = shape.local(world)
    a = attend(matmul(x, w.qkv), loc["hq"], loc["hkv"], shape.head_dim, attention)
    n, h1 = o_proj(a, residual)
    return down_proj(_silu_mul(matmul(n, w.gate_up)), h1)


class OverlappedBlock:
    """The dense block with both row-parallel projections as :class:`fo_lib.modules.RowParallelLinear`
    (overlapped GEMM + AllReduce, fused residual add, pre-norm store and RMSNorm)."""

    def __init__(self, shape: BlockShape, comm, w: DenseWeights, *, device: str, attention="sdpa", plan_kw=None):
        import torch

        from ..modules import RowParallelLinear
        from ..postops import PostOps

        self.shape, self.comm, self.w, self.attention = shape, comm, w, attention
        ops = PostOps(residual=True, residual_out=True, rmsnorm=True, eps=EPS)
        self.o_proj, self.down_proj = (
            RowParallelLinear(weight.shape[1], weight.shape[0], comm, ops=ops, device=device, plan_kw=plan_kw)
            for weight in (w.o, w.down))
        with torch.no_grad():
            for mod, weight, norm in ((self.o_proj, w.o, w.norm_post), (self.down_proj, w.down, w.norm_next)):
                mod.weight.copy_(weight)
                mod.norm_weight.copy_(norm)

    def __call__(self, x, residual):
        return dense_forward(self.shape, self.comm.world_size, self.w, x, residual,
                             self.o_proj, self.down_proj,
                             self.attention)

    @property
    def plans(self) -> list:
        """The plans the projections built (after a call)."""
        return self.o_proj.plans + self.down_proj.plans


class BaselineBlock:
    """The same block: ``torch.matmul``, one ``comm.all_reduce`` per projection, then the residual
    add and torch's ``rms_norm`` (two kernels: the leanest torch has; vLLM fuses them into one)."""

    def __init__(self, shape: BlockShape, comm, w: DenseWeights, *, attention="sdpa"):
        self.shape, self.comm, self.w, self.attention = shape, comm, w, attention

    def _proj(self, a, residual, weight, norm):
        import torch.nn.functional as F

        c = matmul(a, weight)
        self.comm.all_reduce(c.view(-1))
        pre = c + residual
        return F.rms_norm(pre, (pre.shape[1],), norm, EPS), pre

    def __call__(self, x, residual):
        w = self.w
        return dense_forward(self.shape, self.comm.world_size, w, x, residual,
                             lambda a, r: self._proj(a, r, w.o, w.norm_post),
                             lambda a, r: self._proj(a, r, w.down, w.norm_next), self.attention)


def _rmsnorm64(h, weight):
    return h * (h.pow(2).mean(-1, keepdim=True) + EPS).rsqrt() * weight.double()


def _attend64(qkv, hq: int, hkv: int, d: int, mode: str):
    """Attention in float64, head by head with an explicit softmax (independent of torch's SDPA)."""
    import torch

    T = qkv.shape[0]
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=1)
    if mode == "self":
        return v.reshape(T, hkv, 1, d).expand(T, hkv, hq // hkv, d).reshape(T, hq * d)
    future = torch.ones(T, T, dtype=torch.bool, device=qkv.device).triu(1)
    out = torch.empty(T, hq, d, dtype=qkv.dtype, device=qkv.device)
    for h in range(hq):
        kv = h // (hq // hkv)  # grouped-query: consecutive query heads share a KV head
        s = (q[:, h * d:(h + 1) * d] @ k[:, kv * d:(kv + 1) * d].T) / math.sqrt(d)
        out[:, h] = s.masked_fill_(future, float("-inf")).softmax(-1) @ v[:, kv * d:(kv + 1) * d]
    return out.reshape(T, hq * d)


def dense_reference(shape: BlockShape, world: int, shard, x, residual, attention="sdpa"):
    """The whole block in float64: ``(y, h2)``, the sum over all ``world`` ranks' shards
    (``shard(r)`` gives rank r's :class:`DenseWeights`) of each projection."""
    loc = shape.local(world)
    x64, res64 = x.double(), residual.double()
    o = sum(_attend64(x64 @ w.qkv.double().T, loc["hq"], loc["hkv"], shape.head_dim, attention) @ w.o.double().T
            for w in map(shard, range(world)))
    w0 = shard(0)
    h1 = res64 + o
    n = _rmsnorm64(h1, w0.norm_post)
    mlp = 0
    for w in map(shard, range(world)):
        g, u = (n @ w.gate_up.double().T).chunk(2, dim=1)
        mlp = mlp + (g * g.sigmoid() * u) @ w.down.double().T
    h2 = h1 + mlp
    return _rmsnorm64(h2, w0.norm_next), h2


# --- the MoE combine step ---------------------------------------------------------------------------
def moe_routing(shape: BlockShape, world: int, seed: int):
    """Every rank sends ``1 / W`` of its rows to each rank (a random assignment, the same on every
    rank) into shuffled receive slots: each rank gets back ``rows`` contributions, ``top_k`` per
    home token (slot ``q`` is token ``q // top_k``'s ``q % top_k``-th)."""
    from ..engine import Routing

    rows = shape.local(world)["rows"]
    rng = np.random.default_rng([seed, world, rows])
    dest = rng.permutation(np.repeat(np.arange(world), rows // world))
    return Routing.from_destinations([dest] * world, shuffle_seed=seed)


@dataclasses.dataclass(frozen=True)
class MoEInputs:
    """One rank's side of the combine: its experts' rows and weight (as the expert source), and its
    home tokens' gates and residual (as a receiver)."""

    rows: object      # [rows, intermediate]
    weight: object    # [hidden, intermediate]
    gates: object     # [home, top_k], each row sums to 1
    residual: object  # [home, hidden]
    norm: object      # [hidden], replicated


def moe_inputs(shape: BlockShape, world: int, rank: int, seed: int, device, dtype) -> MoEInputs:
    import torch

    loc, H = shape.local(world), shape.hidden
    logits = _randn((loc["home"], shape.top_k), 1.0, device, torch.float32, seed, rank, 3)
    return MoEInputs(rows=_randn((loc["rows"], loc["k"]), 1.0, device, dtype, seed, rank, 0),
                     weight=_randn((H, loc["k"]), loc["k"] ** -0.5, device, dtype, seed, rank, 1),
                     gates=logits.softmax(-1), residual=_randn((loc["home"], H), 1.0, device, dtype, seed, rank, 2),
                     norm=1 + _randn((H,), 0.1, device, dtype, seed, -1, 4))


def moe_combine(recv, inp: MoEInputs, top_k: int):
    """The gated sum of each home token's ``top_k`` received rows, plus the residual, normalised
    (torch, fp32; the same in both paths)."""
    import torch.nn.functional as F

    mixed = (recv.float().view(-1, top_k, recv.shape[1]) * inp.gates[..., None]).sum(1) + inp.residual.float()
    return F.rms_norm(mixed, (mixed.shape[1],), inp.norm.float(), EPS).to(recv.dtype)


class OverlappedMoE:
    """The combine step with :class:`fo_lib.modules.MoECombine` (overlapped GEMM + All-to-All)."""

    def __init__(self, shape: BlockShape, comm, inp: MoEInputs, routing, *, device: str, plan_kw=None):
        import torch

        from ..modules import MoECombine

        self.shape, self.inp, self.routing = shape, inp, routing
        self.combine = MoECombine(inp.weight.shape[1], inp.weight.shape[0], comm, device=device, plan_kw=plan_kw)
        with torch.no_grad():
            self.combine.weight.copy_(inp.weight)

    def __call__(self, rows, residual=None):
        inp = self.inp if residual is None else dataclasses.replace(self.inp, residual=residual)
        return moe_combine(self.combine(rows, self.routing), inp, self.shape.top_k)

    @property
    def plans(self) -> list:
        return self.combine.plans


class BaselineMoE:
    """The same step: :func:`fo_lib.baselines.sequential` (``torch.matmul``, one All-to-All, the rows
    placed by the routing) on the overlapped step's plan, which only lends it the routing."""

    def __init__(self, overlapped: OverlappedMoE):
        self.ovl = overlapped

    def __call__(self, rows, residual=None):
        from .. import baselines

        ovl = self.ovl
        inp = ovl.inp if residual is None else dataclasses.replace(ovl.inp, residual=residual)
        plan = ovl.combine.plan_for(rows, ovl.routing)
        return moe_combine(baselines.sequential(plan, rows, ovl.combine.weight.detach()), inp, ovl.shape.top_k)


def moe_reference(shape: BlockShape, routing, rank: int, source, mine: MoEInputs):
    """The step in float64 on rank ``rank``: every source's rows ``source(s)`` projected and placed
    by the routing, then the gated sum, the residual and the norm."""
    import torch

    total = sum(int((np.asarray(d) == rank).sum()) for d in routing.dest)
    recv = torch.zeros(total, shape.hidden, dtype=torch.float64, device=mine.rows.device)
    for s, dest in enumerate(routing.dest):
        inp = source(s)
        sel = np.flatnonzero(np.asarray(dest) == rank)
        idx = torch.from_numpy(sel).to(inp.rows.device)
        slots = torch.from_numpy(np.asarray(routing.dst_index[s])[sel]).to(inp.rows.device)
        recv[slots] = inp.rows[idx].double() @ inp.weight.double().T
    mixed = (recv.view(-1, shape.top_k, recv.shape[1]) * mine.gates.double()[..., None]).sum(1)
    return _rmsnorm64(mixed + mine.residual.double(), mine.norm)
