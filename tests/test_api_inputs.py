"""Bad arguments of the public API (a plan's build, a call, the modules) on the CPU engine: each must
raise the library's PlanError with one line saying what was expected, before anything runs; none
may end in an internal exception or be accepted. The families: the same parameter with other wrong
types and ranges."""
import math

import numpy as np
import pytest
import torch

from fo_lib import gemm
from fo_lib.comm.cpu_loopback import CpuLoopbackCommunicator
from fo_lib.engine import OverlapPlan, PlanError, Routing
from fo_lib.modules import RowParallelLinear, SequenceParallelLinear
from fo_lib.postops import PostOps

CFG = gemm.CONFIGS["64x64x32"]
M, N, K = 256, 128, 64


def _comm():
    return CpuLoopbackCommunicator(2)


class _Comm:
    """A communicator whose world is whatever the case says (CpuLoopbackCommunicator refuses it)."""

    link, sm_footprint, copy_engine = "emulated", 0, False

    def __init__(self, world_size, rank=0):
        self.world_size, self.rank = world_size, rank

    all_gather_object = None

    def all_reduce(self, *args, **kw):
        raise AssertionError("a collective ran on a communicator the plan should have refused")

    all_gather = reduce_scatter = all_to_all = all_reduce


def build(**kw):
    args = dict(primitive="all_reduce", M=M, N=N, K=K, comm=_comm())
    args.update({k: kw.pop(k) for k in list(kw) if k in args})
    opts = dict(device="cpu", config=CFG, sm_count=4)
    opts.update(kw)
    return OverlapPlan(args["primitive"], args["M"], args["N"], args["K"], args["comm"], **opts)


BUILD = {
    # a shape: whole positive numbers, small enough to allocate
    "M=512.0": dict(M=512.0), "N=128.0": dict(N=128.0), "K=64.0": dict(K=64.0), "M=2.5": dict(M=2.5),
    "M='256'": dict(M="256"), "M=True": dict(M=True), "M=0": dict(M=0), "N=-8": dict(N=-8),
    "M=None": dict(M=None), "K=2**40": dict(K=2 ** 40), "M=2**40": dict(M=2 ** 40), "N=2**33": dict(N=2 ** 33),
    "M=np.float64": dict(M=np.float64(256)),
    # the groups
    "max_groups=0": dict(max_groups=0), "max_groups=-1": dict(max_groups=-1), "max_groups=2.5": dict(max_groups=2.5),
    "max_groups='4'": dict(max_groups="4"), "max_groups=None": dict(max_groups=None),
    "max_groups=True": dict(max_groups=True),
    "partition='22'": dict(partition="22"), "partition='x'": dict(partition="x"), "partition=2": dict(partition=2),
    "partition=(1.5,0.5)": dict(partition=(1.5, 0.5)), "partition=(True,True)": dict(partition=(True, True)),
    "partition=(0,2)": dict(partition=(0, 2)), "partition=()": dict(partition=()),
    "partition=b'11'": dict(partition=b"\x01\x01"), "partition=callable->'11'": dict(partition=lambda *a: "11"),
    "partition sums past the waves": dict(partition=(1, 1, 1, 1, 1)), "partition='tune'": dict(partition="tune"),
    "partition=callable->(5,)": dict(partition=lambda *a: (5,)),
    # the timeout
    "timeout_ms=inf": dict(timeout_ms=math.inf), "timeout_ms=nan": dict(timeout_ms=math.nan),
    "timeout_ms=1e300": dict(timeout_ms=1e300), "timeout_ms=-1": dict(timeout_ms=-1.0),
    "timeout_ms=0": dict(timeout_ms=0), "timeout_ms='10'": dict(timeout_ms="10"),
    "timeout_ms=None": dict(timeout_ms=None), "timeout_ms=True": dict(timeout_ms=True),
    "timeout_ms=1e-9": dict(timeout_ms=1e-9),
    # the communicator
    "comm=None": dict(comm=None), "comm=object()": dict(comm=object()), "comm='gloo'": dict(comm="gloo"),
    "world_size=0": dict(comm=_Comm(0)), "world_size=-1": dict(comm=_Comm(-1)),
    "world_size=2.5": dict(comm=_Comm(2.5)), "rank=2 of 2": dict(comm=_Comm(2, 2)),
    "rank=-1": dict(comm=_Comm(2, -1)), "rank='0'": dict(comm=_Comm(2, "0")),
    # where and how it runs
    "device='gpu'": dict(device="gpu"), "device=None": dict(device=None), "dtype='fp32'": dict(dtype="fp32"),
    "dtype=None": dict(dtype=None), "schedule='x'": dict(schedule="x"), "layout=None": dict(layout=None),
    "reduction=3": dict(reduction=3), "primitive='x'": dict(primitive="x"), "primitive=None": dict(primitive=None),
    "config='64x64x32'": dict(config="64x64x32"), "config=3": dict(config=3),
    "routing='x' (all_to_all)": dict(primitive="all_to_all", routing="x"),
    "routing=dict (all_to_all)": dict(primitive="all_to_all", routing={"dest": [[0] * M] * 2}),
    "routing for all_reduce": dict(routing=Routing.from_destinations([np.zeros(M, int)] * 2)),
    # the SMs
    "ctas=2.9": dict(ctas=2.9), "ctas='2'": dict(ctas="2"), "ctas=0": dict(ctas=0), "ctas=-1": dict(ctas=-1),
    "ctas=True": dict(ctas=True), "comm_sms=-10": dict(comm_sms=-10), "comm_sms=2.5": dict(comm_sms=2.5),
    "comm_sms='1'": dict(comm_sms="1"), "sm_count=0": dict(sm_count=0), "sm_count=-4": dict(sm_count=-4),
    "sm_count=2.5": dict(sm_count=2.5), "sm_count='4'": dict(sm_count="4"),
    "comm_graph='no'": dict(comm_graph="no"),
}
if not torch.cuda.is_available():
    BUILD["device='cuda' without a GPU"] = dict(device="cuda")


@pytest.mark.parametrize("case", list(BUILD))
def test_a_bad_build_argument_raises_a_plan_error(case):
    with pytest.raises(PlanError) as info:
        build(**BUILD[case])
    assert "\n" not in str(info.value), str(info.value)


def _operands(plan):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(plan.M, plan.K, generator=gen).bfloat16()
    b = torch.randn(plan.N, plan.K, generator=gen).bfloat16()
    return a, b


def _bf(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16)


RUN = {  # keyword arguments of a call (a and b are the plan's own unless given)
    "a=None": dict(a=None), "a=numpy": dict(a=np.zeros((M, K))), "a wrong shape": dict(a=_bf(M, K + 8)),
    "a float32": dict(a=torch.zeros(M, K)), "a requires grad": dict(a=_bf(M, K).requires_grad_()),
    "b requires grad": dict(b=_bf(N, K).requires_grad_()),
    "ops=None": dict(ops=None), "ops='relu'": dict(ops="relu"), "ops=dict": dict(ops={"bias": True}),
    "out wrong shape": dict(out=_bf(M, N + 1)), "out wrong dtype": dict(out=torch.zeros(M, N)),
    "out=numpy": dict(out=np.zeros((M, N))), "out 1-D": dict(out=_bf(M * N)),
    "out non-contiguous": dict(out=_bf(N, M).T),
    "residual int64": dict(ops=PostOps(residual=True), residual=torch.zeros(M, N, dtype=torch.int64)),
    "residual float32": dict(ops=PostOps(residual=True), residual=torch.zeros(M, N)),
    "residual wrong shape": dict(ops=PostOps(residual=True), residual=_bf(M, N + 1)),
    "residual=list": dict(ops=PostOps(residual=True), residual=[[0.0] * N] * M),
    "residual missing": dict(ops=PostOps(residual=True)),
    "residual without the op": dict(residual=_bf(M, N)),
    "bias wrong shape": dict(ops=PostOps(bias=True), bias=_bf(N + 1)),
    "bias int32": dict(ops=PostOps(bias=True), bias=torch.zeros(N, dtype=torch.int32)),
    "weight requires grad": dict(ops=PostOps(rmsnorm=True), weight=torch.ones(N, dtype=torch.bfloat16,
                                                                               requires_grad=True)),
    "weight wrong shape": dict(ops=PostOps(rmsnorm=True), weight=_bf(N, 1)),
    "residual_out wrong dtype": dict(ops=PostOps(residual_out=True), residual_out=torch.zeros(M, N)),
    "residual_out without the op": dict(residual_out=_bf(M, N)),
}


@pytest.mark.parametrize("case", list(RUN))
def test_a_bad_call_argument_raises_a_plan_error_and_leaves_the_plan_usable(case):
    plan = build()
    a, b = _operands(plan)
    kw = dict(RUN[case])
    a, b = kw.pop("a", a), kw.pop("b", b)
    with pytest.raises(PlanError) as info:
        plan.run(a, b, **kw)
    assert "\n" not in str(info.value), str(info.value)
    a, b = _operands(plan)
    want = 2 * (a.double() @ b.double().T)  # two identical virtual ranks
    got = plan.run(a, b).double()
    assert float((got - want).norm() / want.norm()) < 2e-2


MODULE = {
    "in_features=0": dict(in_features=0), "in_features=-64": dict(in_features=-64),
    "in_features=2.5": dict(in_features=2.5), "in_features='64'": dict(in_features="64"),
    "out_features=0": dict(out_features=0), "out_features=None": dict(out_features=None),
    "out_features=True": dict(out_features=True), "comm=None": dict(comm=None),
    "dtype='fp32'": dict(dtype="fp32"), "device='tpu'": dict(device="tpu"), "ops=None": dict(ops=None),
    "ops='relu'": dict(ops="relu"), "bias='yes'": dict(bias="yes"), "plan_kw=3": dict(plan_kw=3),
    "plan_kw unknown key": dict(plan_kw={"colour": 1}), "graphs='no'": dict(graphs="no"),
}


@pytest.mark.parametrize("cls", [RowParallelLinear, SequenceParallelLinear])
@pytest.mark.parametrize("case", list(MODULE))
def test_a_bad_module_argument_raises_a_plan_error(cls, case):
    kw = dict(in_features=K, out_features=N, comm=_comm(), device="cpu", plan_kw=dict(config=CFG, sm_count=4))
    kw.update(MODULE[case])
    with pytest.raises(PlanError) as info:
        cls(kw.pop("in_features"), kw.pop("out_features"), kw.pop("comm"), **kw)
    assert "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize("x", [None, np.zeros((M, K)), _bf(M, K + 8), _bf(K), torch.zeros(M, K)],
                         ids=["None", "numpy", "wrong width", "1-D", "float32"])
def test_a_bad_module_input_raises_a_plan_error(x):
    layer = RowParallelLinear(K, N, _comm(), device="cpu", plan_kw=dict(config=CFG, sm_count=4))
    with pytest.raises(PlanError):
        layer(x)


@pytest.mark.parametrize("args", [(0,), (-1,), (2.5,), ("2",), (True,), (None,), (2, 2), (2, -1), (2, "0"), (2, 1.0)],
                         ids=str)
def test_a_bad_cpu_loopback_is_refused_with_the_communicators_error(args):
    from fo_lib.comm import CommError
    with pytest.raises(CommError) as info:
        CpuLoopbackCommunicator(*args)
    assert "\n" not in str(info.value) and isinstance(info.value, ValueError)
