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

    python scripts/profile_signal_cost.py --out signal_cost.csv            # runs ncu on itself
    FO_NVRTC_OPTIONS=-DNAME=1 python scripts/profile_signal_cost.py ...    # a kernel experiment
"""
from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Each variant, in launch order, and the kernel it launches (the kernel's name ends in _<instantiation>).
KERNEL_OF = {"plain": "plain", "plain_comm": "plain", "signal_rows": "signal_store", "signal_tiles": "signal_store",
               "signal_tiles_4g": "signal_store", "scatter": "scatter", "signal_rows_no_group": "signal_store",
               "signal_tiles_no_group": "signal_store"}
VARIANTS = tuple(KERNEL_OF)
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

    from bench_gemm import tile_tables
    from fo_lib import gemm

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


def ncu_number(value, blank: float | None = None) -> float:
    """One of ncu's CSV numbers ("1,517.3": thousands separators); an empty cell is ``blank``
    (an error when ``blank`` is None)."""
    text = str(value).replace(",", "").strip()
    if text in ("", "nan") and blank is not None:
        return blank
    return float(text)


_MS_PER_UNIT = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}


def parse_ncu_csv(stdout: str, labels):
    """ncu's ``--csv --page raw`` output (the target's and ncu's own lines mixed in) -> one row per
    launch, labelled in launch order by ``labels`` = [(M, N, K, variant), ...]."""
    import pandas as pd

    lines = stdout.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if first is None:
        raise SystemExit(f"no CSV in ncu's output:\n{stdout[-3000:]}")
    table = pd.read_csv(io.StringIO("\n".join(line for line in lines[first:] if line.startswith('"'))))
    units, raw = table.iloc[0], table.iloc[1:]  # the first row holds the units
    if len(raw) != len(labels):
        raise SystemExit(f"ncu profiled {len(raw)} launches, expected {len(labels)}")
    scale = _MS_PER_UNIT.get(str(units["gpu__time_duration.sum"]))
    if scale is None:
        raise SystemExit(f"unknown duration unit {units['gpu__time_duration.sum']!r} in ncu's output")
    rows = []
    for (M, N, K, name), (_, r) in zip(labels, raw.iterrows()):
        kernel = str(r["Kernel Name"])
        if not kernel.endswith("_" + KERNEL_OF[name]):
            raise SystemExit(f"launch order mismatch: {name} profiled as {kernel}")
        rows.append(dict(M=M, N=N, K=K, variant=name, kernel=kernel,
                         ms=ncu_number(r["gpu__time_duration.sum"]) * scale,
                         instructions=int(ncu_number(r["smsp__inst_executed.sum"]))))
    return pd.DataFrame(rows)


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
    return parse_ncu_csv(done.stdout, labels)


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
