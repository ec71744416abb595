"""The portable GEMM's signal cost at locked clocks, kernel by kernel, under Nsight Compute.

The interleaved benchmark (``bench_gemm.py``) times the H200 at its own, power-capped clocks; two runs
of the same code differ by about 1 % per shape, as much as the costs looked for. Here every launch is
profiled alone by ``ncu --clock-control base --cache-control all`` (base clocks, caches flushed
before each kernel), which makes the kernel duration repeatable, and the epilogue variants are
compared shape by shape (median over ``--repeat`` launches):

* ``plain``: C row-major; ``plain_comm``: the same into the communication buffer;
* ``signal_rows``: C row-major into the buffer plus the signal, one group per wave (a release per
  tile); ``signal_tiles``: each tile at its place plus the signal, one group per wave;
  ``signal_tiles_4g``: the same with at most 4 groups (a release per group a CTA leaves);
* ``scatter``: the row-table store without the signal;
* ``signal_rows_no_group``, ``signal_tiles_no_group``: those kernels with every tile's group -1, so
  no release is ever due: the same binaries without the release's run-time cost.

ncu's CSV is read by :mod:`fo_lib.reports.ncu`.

    python scripts/profile/profile_signal_cost.py --out signal_cost.csv            # runs ncu on itself
    FO_NVRTC_OPTIONS=-DNAME=1 python scripts/profile/profile_signal_cost.py ...    # a kernel experiment
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fo_lib.reports.ncu import VARIANTS, parse_ncu_csv  # noqa: E402

DEFAULT_SHAPES = ("2048x8192x1024", "2048x8192x4096", "8192x8192x1024", "8192x8192x4096", "4096x4096x8192")


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        M, N, K = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r} is not MxNxK") from None
    return M, N, K


def launch(shapes, repeat: int, variants=VARIANTS) -> None:
    """Launch every variant ``repeat`` times per shape, in the order ``collect`` expects."""
    import torch

    from fo_lib import gemm
    from fo_lib.testing import tile_tables

    sms = gemm.sm_count()
    for M, N, K in shapes:
        a = torch.randn(M, K, device="cuda").bfloat16()
        b = torch.randn(N, K, device="cuda").bfloat16()
        c = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        comm = torch.empty(M * N, dtype=torch.bfloat16, device="cuda")
        cfg = gemm.default_config(M, N, K, sms)
        ro, tg, cnt, place = tile_tables(M, N, cfg, sms)
        _, tg4, cnt4, place4 = tile_tables(M, N, cfg, sms, groups=4)
        no_group = torch.full_like(tg, -1)  # no tile's group is ever due: the release skipped at run time
        calls = {
            "plain": lambda: gemm.gemm_nt(a, b, c, config=cfg),
            "plain_comm": lambda: gemm.gemm_nt(a, b, comm.view(M, N), config=cfg),
            "signal_rows": lambda: gemm.gemm_nt_signal(a, b, comm, None, tg, cnt, config=cfg),
            "signal_tiles": lambda: gemm.gemm_nt_signal(a, b, comm, None, tg, cnt, config=cfg, tile_place=place),
            "signal_tiles_4g": lambda: gemm.gemm_nt_signal(a, b, comm, None, tg4, cnt4, config=cfg,
                                                           tile_place=place4),
            "scatter": lambda: gemm.gemm_nt_scatter(a, b, comm, ro, config=cfg),
            "signal_rows_no_group": lambda: gemm.gemm_nt_signal(a, b, comm, None, no_group, cnt, config=cfg),
            "signal_tiles_no_group": lambda: gemm.gemm_nt_signal(a, b, comm, None, no_group, cnt, config=cfg,
                                                                 tile_place=place),
        }
        for _ in range(repeat):
            for name in variants:
                calls[name]()
        torch.cuda.synchronize()


def collect(shapes, repeat: int, ncu: str):
    """Run ncu on this script's launch mode; one row per launch (shape, variant, ms, instructions)."""
    cmd = [ncu, "--clock-control", "base", "--cache-control", "all", "--csv", "--page", "raw",
           "-k", "regex:fo_gemm_nt", "--metrics", "gpu__time_duration.sum,smsp__inst_executed.sum",
           sys.executable, __file__, "--launch", "--repeat", str(repeat),
           "--shapes", *[f"{M}x{N}x{K}" for M, N, K in shapes]]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"ncu failed ({done.returncode}):\n{done.stderr[-3000:]}\n{done.stdout[-3000:]}")
    labels = [(M, N, K, name) for M, N, K in shapes for _ in range(repeat) for name in VARIANTS]
    try:
        return parse_ncu_csv(done.stdout, labels)
    except ValueError as e:
        raise SystemExit(str(e)) from None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="CSV file to write (one row per shape and variant)")
    p.add_argument("--shapes", type=parse_shape, nargs="*", default=[parse_shape(s) for s in DEFAULT_SHAPES])
    p.add_argument("--repeat", type=int, default=3, help="launches per variant and shape (median)")
    p.add_argument("--ncu", default="ncu")
    p.add_argument("--launch", action="store_true", help=argparse.SUPPRESS)  # ncu's target
    args = p.parse_args(argv)
    if args.launch:
        launch(args.shapes, args.repeat)
        return
    if not args.out:
        p.error("--out is required")
    from fo_lib.provenance import write_result

    runs = collect(args.shapes, args.repeat, args.ncu)
    med = runs.groupby(["M", "N", "K", "variant"], sort=False).agg(
        ms=("ms", "median"), ms_min=("ms", "min"), ms_max=("ms", "max"),
        instructions=("instructions", "median")).reset_index()
    plain = med[med.variant == "plain"].set_index(["M", "N", "K"])
    med["vs_plain_pct"] = [100 * (row.ms / plain.loc[(row.M, row.N, row.K), "ms"] - 1) for row in med.itertuples()]
    med["inst_vs_plain_pct"] = [100 * (row.instructions / plain.loc[(row.M, row.N, row.K), "instructions"] - 1)
                                for row in med.itertuples()]
    write_result(med, args.out, link="none", repeat=args.repeat, clocks="base (ncu --clock-control base)")
    wide = med.pivot_table(index=["M", "N", "K"], columns="variant", values="vs_plain_pct", sort=False)
    print(wide[[v for v in VARIANTS if v != "plain"]].round(2).to_string())
    print("median over shapes (% vs plain):", wide.median().drop("plain").round(2).to_dict())


if __name__ == "__main__":
    main()
