"""Can NCCL's copy-engine (CE) collectives carry the communication with no SM at all?

NCCL 2.28 runs AllGather and All-to-All on the copy engines (no CTA) when the communicator's CTA
policy is ``NCCL_CTA_POLICY_ZERO`` and both buffers lie in symmetric windows
(``ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC)``). On 2 GPUs an AllReduce of ``S`` bytes
moves as much over NVLink as an AllGather of ``S`` per rank, followed by a sum of the W copies,
which the post-reorder could do. This probe answers, under torchrun on 2+ GPUs:

1. what this torch/NCCL exposes (CTA policy, symmetric memory backends, window registration);
2. AllGather time on the CE path vs the SM path, vs NCCL's AllReduce of the same bytes;
3. whether the CE AllGather can be captured in a CUDA graph and replays correctly;
4. how much each path slows a concurrent cuBLAS GEMM that holds every SM, and vice versa.

    torchrun --standalone --nproc_per_node 2 scripts/probe_copy_engine.py --out DIR

Writes ``DIR/copy_engine_probe.json`` (rank 0) and prints a table.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import statistics
import sys
import traceback
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("NCCL_CUMEM_ENABLE", "1")
os.environ.setdefault("NCCL_CGA_CLUSTER_SIZE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CTA_POLICY_ZERO = 2
report: dict = {"steps": {}}


def log(*a):
    if dist.get_rank() == 0:
        print(*a, flush=True)


def step(name):
    def wrap(fn):
        def run(*a, **k):
            try:
                out = fn(*a, **k)
                report["steps"][name] = {"ok": True, **(out or {})}
            except Exception as exc:  # noqa: BLE001 - a probe records what fails and goes on
                report["steps"][name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                                         "trace": traceback.format_exc()[-1500:]}
                log(f"[{name}] failed: {type(exc).__name__}: {exc}")
                out = None
            return out
        return run
    return wrap


def timed(fn, stream, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(stream)
        fn()
        e.record(stream)
        e.synchronize()
        ms.append(s.elapsed_time(e))
    return statistics.median(ms)


class Windowed:
    """A buffer from NCCL's allocator (cuMem, as symmetric windows need), window-registered on ``group``
    (the registration is fo_lib's, ``fo_lib.comm.torch_dist._register_window``)."""

    def __init__(self, group, numel, dtype, device):
        from fo_lib.comm.torch_dist import _register_window

        backend = group._get_backend(device)
        self.pool = torch.cuda.MemPool(backend.mem_allocator)
        with torch.cuda.use_mem_pool(self.pool):
            self.t = torch.zeros(numel, dtype=dtype, device=device)
        torch.cuda.synchronize()
        self.win = _register_window(backend._comm_ptr(), self.t.data_ptr(), self.t.numel() * self.t.element_size())


def library_sizes() -> int:
    from fo_lib.comm.torch_dist import TorchDistCommunicator, init_from_env

    comm = init_from_env("nccl")
    ce = TorchDistCommunicator(copy_engine=True)
    dev = torch.device("cuda", torch.cuda.current_device())
    W, rank = comm.world_size, comm.rank
    if os.environ.get("FO_PROBE_WARM"):
        t = torch.ones(8, device=dev)
        ce.all_reduce(t)
        print(f"rank {rank}: warmed the communicator with an AllReduce: {t[0].item()}", flush=True)
    for nbytes in (64 << 20, 4 << 20, 1 << 20, 256 << 10, 64 << 10, 16 << 10, 4 << 10, 1 << 10, 4 * 21 * 39, 2 * 87):
        n = nbytes // 2
        try:
            recv = ce.empty(W * n, torch.bfloat16, dev)
            recv.zero_()
            mine = recv[rank * n:(rank + 1) * n]
            mine.fill_(rank + 1)
            ce.all_gather(mine, recv)
            torch.cuda.synchronize()
            ok = bool((recv.view(W, n) == torch.arange(1, W + 1, device=dev).view(W, 1)).all().item())
            print(f"rank {rank}: {nbytes} B per rank in place: ok={ok} ptr%4096={recv.data_ptr() % 4096}", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"rank {rank}: {nbytes} B per rank FAILED: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            os._exit(1)
    dist.destroy_process_group()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--mb", type=int, nargs="+", default=[4, 16, 64, 128], help="bytes per rank (MiB) of the AllGather")
    ap.add_argument("--library", action="store_true",
                    help="instead: fo_lib's copy-engine communicator, in-place AllGather from large to small "
                         "sizes until one fails (a failed NCCL call ends the communicator)")
    args = ap.parse_args(argv)

    if args.library:
        return library_sizes()
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    opts = dist.ProcessGroupNCCL.Options()
    opts.is_high_priority_stream = True
    dist.init_process_group("nccl", device_id=dev, pg_options=opts)
    W = dist.get_world_size()
    report.update(torch=torch.__version__, nccl=".".join(map(str, torch.cuda.nccl.version())), world=W,
                  gpu=torch.cuda.get_device_name(dev),
                  env={k: v for k, v in os.environ.items() if k.startswith("NCCL_")})
    cfg = dist.ProcessGroupNCCL.Options().config
    report["config_fields"] = [n for n in dir(cfg) if not n.startswith("_")]
    report["pg_nccl_attrs"] = [n for n in dir(dist.ProcessGroupNCCL) if "CTA" in n.upper() or "POLICY" in n.upper()]
    try:
        import torch.distributed._symmetric_memory as symm
        report["symm_mem"] = [n for n in dir(symm) if not n.startswith("__")][:80]
    except Exception as exc:  # noqa: BLE001
        report["symm_mem"] = f"{type(exc).__name__}: {exc}"
    log(json.dumps({k: report[k] for k in ("torch", "nccl", "config_fields", "pg_nccl_attrs")}))

    groups = {}

    @step("ce_group")
    def make_group():
        o = dist.ProcessGroupNCCL.Options()
        o.is_high_priority_stream = True
        policy = getattr(dist.ProcessGroupNCCL, "NCCL_CTA_POLICY_ZERO", CTA_POLICY_ZERO)
        o.config.cta_policy = policy
        g = dist.new_group(list(range(W)), pg_options=o)
        t = torch.ones(1, device=dev)
        dist.all_reduce(t, group=g)  # creates the communicator
        torch.cuda.synchronize()
        groups["ce"] = g
        return {"policy": int(policy)}

    make_group()
    comm_stream = torch.cuda.Stream(device=dev, priority=-100)
    results = []
    max_mb = max(args.mb)
    n_max = max_mb * (1 << 20) // 2
    bufs = {}

    @step("windows")
    def make_windows():
        g = groups["ce"]
        bufs["send"] = Windowed(g, n_max, torch.bfloat16, dev)
        bufs["recv"] = Windowed(g, W * n_max, torch.bfloat16, dev)
        return {}

    if "ce" in groups:
        make_windows()
    plain_send = torch.empty(n_max, dtype=torch.bfloat16, device=dev)
    plain_recv = torch.empty(W * n_max, dtype=torch.bfloat16, device=dev)
    ar_buf = torch.empty(n_max, dtype=torch.bfloat16, device=dev)

    def check_gather(recv, n):
        got = recv[: W * n].view(W, n)
        want = torch.arange(W, device=dev, dtype=torch.bfloat16).view(W, 1) + 1
        return bool((got == want).all().item())

    for mb in args.mb:
        n = mb * (1 << 20) // 2
        row = {"mb_per_rank": mb}
        with torch.cuda.stream(comm_stream):
            ar = ar_buf[:n]
            row["all_reduce_ms"] = timed(lambda: dist.all_reduce(ar), comm_stream)
            ps, pr = plain_send[:n], plain_recv[: W * n]
            ps.fill_(rank + 1)
            row["all_gather_sm_ms"] = timed(lambda: dist.all_gather_into_tensor(pr, ps), comm_stream)
            row["all_gather_sm_ok"] = check_gather(plain_recv, n)
            if "send" in bufs:
                s, r = bufs["send"].t[:n], bufs["recv"].t[: W * n]
                s.fill_(rank + 1)
                r.zero_()
                g = groups["ce"]
                row["all_gather_ce_ms"] = timed(lambda: dist.all_gather_into_tensor(r, s, group=g), comm_stream)
                row["all_gather_ce_ok"] = check_gather(bufs["recv"].t, n)
                # in place: this rank's chunk already sits at its place in the receive buffer
                r.zero_()
                mine = r[rank * n:(rank + 1) * n]
                mine.fill_(rank + 1)
                row["all_gather_ce_inplace_ms"] = timed(lambda: dist.all_gather_into_tensor(r, mine, group=g),
                                                        comm_stream)
                row["all_gather_ce_inplace_ok"] = check_gather(bufs["recv"].t, n)
                # the same group on ordinary buffers (no window): which path does NCCL take then?
                row["all_gather_cegroup_plain_ms"] = timed(
                    lambda: dist.all_gather_into_tensor(pr, ps, group=g), comm_stream)
        results.append(row)
        log(row)
    report["curves"] = results

    @step("beside_gemm")
    def beside():
        M = N = K = 8192
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
        gemm_stream = torch.cuda.Stream(device=dev)
        out = {}
        with torch.cuda.stream(gemm_stream):
            out["gemm_alone_ms"] = timed(lambda: torch.matmul(a, b), gemm_stream, reps=10)
        n = 64 * (1 << 20) // 2
        paths = {"all_reduce_sm": lambda: dist.all_reduce(ar_buf[:n]),
                 "all_gather_sm": lambda: dist.all_gather_into_tensor(plain_recv[: W * n], plain_send[:n])}
        if "send" in bufs:
            g = groups["ce"]
            s, r = bufs["send"].t[:n], bufs["recv"].t[: W * n]
            paths["all_gather_ce"] = lambda: dist.all_gather_into_tensor(r, s, group=g)
        for name, fn in paths.items():
            with torch.cuda.stream(comm_stream):
                alone = timed(fn, comm_stream, reps=10)
            reps = max(1, int(out["gemm_alone_ms"] / alone))
            gm, cm = [], []
            for _ in range(7):
                torch.cuda.synchronize()
                dist.barrier()
                e = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
                e[0].record(gemm_stream)
                with torch.cuda.stream(gemm_stream):
                    torch.matmul(a, b)
                e[1].record(gemm_stream)
                comm_stream.wait_event(e[0])
                e[2].record(comm_stream)
                with torch.cuda.stream(comm_stream):
                    for _ in range(reps):
                        fn()
                e[3].record(comm_stream)
                torch.cuda.synchronize()
                gm.append(e[0].elapsed_time(e[1]))
                cm.append(e[2].elapsed_time(e[3]) / reps)
            out[name] = {"comm_alone_ms": alone, "reps": reps, "gemm_beside_ms": statistics.median(gm),
                         "comm_beside_ms": statistics.median(cm)}
            log(name, out[name])
        return out

    beside()

    @step("graph_capture")
    def capture():
        n = 16 * (1 << 20) // 2
        s, r = bufs["send"].t[:n], bufs["recv"].t[: W * n]
        g = groups["ce"]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(comm_stream):
            dist.all_gather_into_tensor(r, s, group=g)
        torch.cuda.synchronize()
        print(f"rank {rank}: capturing", flush=True)
        # A hang here or in the replay dumps every thread's stack and ends the process.
        faulthandler.dump_traceback_later(45, exit=True)
        with torch.cuda.graph(graph, stream=comm_stream):
            dist.all_gather_into_tensor(r, s, group=g)
        torch.cuda.synchronize()
        print(f"rank {rank}: captured", flush=True)
        s.fill_(rank + 11)
        r.zero_()
        torch.cuda.synchronize()
        dist.barrier()
        graph.replay()
        torch.cuda.synchronize()
        print(f"rank {rank}: replayed", flush=True)
        faulthandler.cancel_dump_traceback_later()
        got = r.view(W, n)
        want = torch.arange(W, device=dev, dtype=torch.bfloat16).view(W, 1) + 11
        ms = timed(graph.replay, torch.cuda.current_stream())
        return {"correct": bool((got == want).all().item()), "replay_ms": ms}

    if "send" in bufs:
        capture()

    dist.barrier()
    if rank == 0:
        print(json.dumps({k: v for k, v in report.items() if k != "steps"}, indent=1)[:4000])
        for k, v in report["steps"].items():
            print(k, {kk: vv for kk, vv in v.items() if kk != "trace"})
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "copy_engine_probe.json").write_text(json.dumps(report, indent=1))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
