"""The per-shape tables that ``scripts/bench/bench_gemm.py`` prints, read back from a
``scripts/gpu_run.sh`` log.

A GPU call's ``run.log`` holds, for every benchmark run of the call (the ``bench_gemm`` step and each
``exp_gemm`` option set), the table printed while it ran: per shape the TFLOP/s of cuBLAS, of the
plain kernel and of the signal (tile places), and the scatter's and the signal's time over plain's
in percent. :func:`read_log_tables` reads them into one DataFrame (one row per run and shape); the
command line is ``scripts/bench/gemm_log_tables.py``.
"""
from __future__ import annotations

import re

COLUMNS = ("M", "N", "K", "config", "torch", "ours", "x", "signal", "scatter_pct", "signal_pct")


def _run_name(header: str) -> str:
    """A readable name for the run a ``=== bench_gemm`` / ``=== exp_gemm`` header line starts."""
    options = re.search(r"FO_NVRTC_OPTIONS=(\S*)", header)
    order = re.search(r"--order (\S+)", header)
    name = header.split()[1]
    if options is not None:
        name += f" [{options.group(1) or 'no options'}]"
    return name + f" order={order.group(1) if order else '(the script default)'}"


def read_log_tables(text: str):
    """Every benchmark table in a ``gpu_run.sh`` log -> DataFrame with a ``run`` column (the order in
    the log, ``index``) and :data:`COLUMNS`."""
    import pandas as pd

    rows, run, index = [], None, -1
    for line in text.splitlines():
        if line.startswith(("=== bench_gemm (", "=== exp_gemm (")):
            index += 1
            run = _run_name(line)
            continue
        fields = line.split()
        if run is None or len(fields) < len(COLUMNS) or not fields[0].isdigit() or "/" not in fields[3]:
            continue
        values = [int(v) for v in fields[:3]] + [fields[3]] + [float(v) for v in fields[4:len(COLUMNS)]]
        rows.append(dict(index=index, run=run, **dict(zip(COLUMNS, values))))
    if not rows:
        raise ValueError("no bench_gemm table in this log")
    return pd.DataFrame(rows)
