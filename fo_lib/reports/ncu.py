"""Nsight Compute's CSV output, read back: the raw page (one row per profiled launch: duration and
executed instructions) and the source page (one row per SASS instruction: executed count and warp
stall samples by reason), the classes an instruction falls in by how often it runs per tile, and
the opcode mix per unit of GEMM work (to set one kernel's instruction stream beside another's).

``scripts/profile/profile_signal_cost.py`` (the signal's cost at locked clocks, launch by launch),
``scripts/profile/profile_stall_sites.py`` (where the stall samples land, instruction by
instruction) and ``scripts/profile/profile_sm90_sass.py`` (the Hopper GEMM's opcodes against
cuBLAS's) run ncu on the GPU (:func:`profile_and_export`) and read its output with these.
"""
from __future__ import annotations

import io
import subprocess
from pathlib import Path

# The epilogue variants the two ncu scripts profile, in launch order, and the kernel instantiation
# each launches (a profiled kernel's name ends in ``_<instantiation>``).
KERNEL_OF = {"plain": "plain", "plain_comm": "plain", "signal_rows": "signal_store", "signal_tiles": "signal_store",
             "signal_tiles_4g": "signal_store", "scatter": "scatter", "signal_rows_no_group": "signal_store",
             "signal_tiles_no_group": "signal_store"}
VARIANTS = tuple(KERNEL_OF)
# The stall reasons kept in a class summary (ncu's source-page columns, "stall_<reason>").
REASONS = ("barrier", "long_sb", "short_sb", "wait", "mio", "math", "lg", "membar", "branch_resolving",
           "dispatch", "no_inst", "not_selected", "selected")


def ncu_number(value, blank: float | None = None) -> float:
    """One of ncu's CSV numbers ("1,517.3": thousands separators); an empty cell is ``blank``
    (an error when ``blank`` is None)."""
    text = str(value).replace(",", "").strip()
    if text in ("", "nan") and blank is not None:
        return blank
    return float(text)


_MS_PER_UNIT = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}


def parse_ncu_csv(stdout: str, labels, kernel_of=KERNEL_OF):
    """ncu's ``--csv --page raw`` output (the target's and ncu's own lines mixed in) -> one row per
    launch, labelled in launch order by ``labels`` = [(M, N, K, variant), ...]; each launch's kernel
    must be the one ``kernel_of[variant]`` names. Raises ValueError for output that does not fit."""
    import pandas as pd

    lines = stdout.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if first is None:
        raise ValueError(f"no CSV in ncu's output:\n{stdout[-3000:]}")
    table = pd.read_csv(io.StringIO("\n".join(line for line in lines[first:] if line.startswith('"'))))
    units, raw = table.iloc[0], table.iloc[1:]  # the first row holds the units
    if len(raw) != len(labels):
        raise ValueError(f"ncu profiled {len(raw)} launches, expected {len(labels)}")
    scale = _MS_PER_UNIT.get(str(units["gpu__time_duration.sum"]))
    if scale is None:
        raise ValueError(f"unknown duration unit {units['gpu__time_duration.sum']!r} in ncu's output")
    rows = []
    for (M, N, K, name), (_, r) in zip(labels, raw.iterrows()):
        kernel = str(r["Kernel Name"])
        if not kernel.endswith("_" + kernel_of[name]):
            raise ValueError(f"launch order mismatch: {name} profiled as {kernel}")
        rows.append(dict(M=M, N=N, K=K, variant=name, kernel=kernel,
                         ms=ncu_number(r["gpu__time_duration.sum"]) * scale,
                         instructions=int(ncu_number(r["smsp__inst_executed.sum"]))))
    return pd.DataFrame(rows)


def _number(col):
    return col.map(lambda v: ncu_number(v, blank=0.0))


def read_details_csv(text: str):
    """ncu's details page (CSV: one row per launch, section and metric, ``"ID"`` first) -> DataFrame
    of strings as ncu wrote them; ncu's own lines before the table are skipped."""
    import pandas as pd

    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if first is None:
        raise ValueError("no details table in ncu's output")
    t = pd.read_csv(io.StringIO("\n".join(lines[first:])), dtype=str, keep_default_na=False)
    need = {"ID", "Kernel Name", "Section Name", "Metric Name", "Metric Value"}
    if not need <= set(t.columns):
        raise ValueError(f"ncu's details table lacks {sorted(need - set(t.columns))}")
    return t


def read_source_csv(text: str):
    """ncu's source page (CSV) -> DataFrame with ``address``, ``sass``, ``samples``,
    ``samples_not_issued``, ``executed`` and one ``stall_<reason>`` column per reason ncu reports
    (all samples, not the "Not Issued" ones). ncu's own lines before the table are skipped."""
    import pandas as pd

    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if first is None:
        raise ValueError("no source table in ncu's output")
    t = pd.read_csv(io.StringIO("\n".join(lines[first:])))
    need = {"Address", "Source", "Warp Stall Sampling (All Samples)",
            "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed"}
    if not need <= set(t.columns):
        raise ValueError(f"ncu's source table lacks {sorted(need - set(t.columns))}")
    out = pd.DataFrame({
        "address": t["Address"].astype(str),
        "sass": t["Source"].astype(str).str.strip(),
        "samples": _number(t["Warp Stall Sampling (All Samples)"]),
        "samples_not_issued": _number(t["Warp Stall Sampling (Not-issued Samples)"]),
        "executed": _number(t["Instructions Executed"]),
    })
    for c in t.columns:
        if c.startswith("stall_") and "Not Issued" not in c:
            out[c] = _number(t[c])
    return out


def classify(executed, warp_tiles: int, k_tiles: int) -> list[str]:
    """The class of each instruction from its executed count (warp instructions over the launch),
    ``warp_tiles`` = tiles x warps per CTA, ``k_tiles`` per tile:

    * ``k-tile``: about once per k-tile (the main loop's hot path);
    * ``tile``: about once per tile (the top of a tile, the load cursor's move, the epilogue);
    * ``rare``: less than once per tile (the release, done by one thread; the kernel's start and end);
    * ``never``: not executed (stall samples still land there, e.g. on a branch's target).
    """
    out = []
    for e in executed:
        per_tile = e / warp_tiles
        if e == 0:
            out.append("never")
        elif k_tiles > 3 and per_tile >= k_tiles - 3:
            out.append("k-tile")
        elif per_tile >= 0.5:
            out.append("tile")
        else:
            out.append("rare")
    return out


def summarize(df, **labels):
    """One row per class (``df.cls``, :func:`classify`): samples, executed instructions, static
    instructions, samples per reason (:data:`REASONS`)."""
    rows = []
    for cls, g in df.groupby("cls"):
        row = dict(labels, cls=cls, samples=int(g.samples.sum()), not_issued=int(g.samples_not_issued.sum()),
                   executed=int(g.executed.sum()), instructions=len(g))
        for r in REASONS:
            row[r] = int(g[f"stall_{r}"].sum()) if f"stall_{r}" in g else 0
        rows.append(row)
    return rows


# ncu's export of a report's source page: one row per SASS instruction (read_source_csv reads it).
SOURCE_EXPORT = ("--page", "source", "--csv", "--print-source", "sass")
# A unit of GEMM work for the opcode mix: one 128 x 128 x 64 block of multiply-adds, whatever tile a
# kernel runs (so kernels of different tiles compare per the same work).
UNIT_MACS = 128 * 128 * 64


def opcode(sass: str) -> str:
    """The opcode of one SASS line without its predicate or modifiers (``@!P0 IMAD.WIDE.U32 R2, ...``
    -> ``IMAD``)."""
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def opcode_mix(df, M: int, N: int, K: int, **labels) -> list[dict]:
    """One row per opcode of a source page (:func:`read_source_csv`) of an ``M x N x K`` GEMM: the
    shape, ``labels``, warp instructions executed, the same per unit of work (:data:`UNIT_MACS`),
    static instructions, stall samples; most executed first."""
    units = M * N * K / UNIT_MACS
    rows = []
    for op, g in df.assign(op=df.sass.map(opcode)).groupby("op"):
        executed = int(g.executed.sum())
        rows.append(dict(labels, M=M, N=N, K=K, opcode=op, executed=executed, per_unit=round(executed / units, 3),
                         instructions=len(g), samples=int(g.samples.sum())))
    return sorted(rows, key=lambda r: -r["executed"])


def profile_and_export(ncu: str, profile_args, target, report: Path, export_args, keep: bool = False) -> str:
    """Run ``ncu <profile_args> -f -o report <target>`` (``report`` a ``.ncu-rep`` path), then
    ``ncu -i report <export_args>``; returns the export's stdout (a page as CSV, without ncu's own
    messages) and removes the report unless ``keep``. A failure of either step stops the script with
    ncu's output."""
    report = Path(report)
    done = subprocess.run([ncu, *profile_args, "-f", "-o", str(report), *target], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0 or not report.exists():
        raise SystemExit(f"ncu failed for {report.name} ({done.returncode}):\n{done.stderr[-2000:]}\n"
                         f"{done.stdout[-2000:]}")
    exp = subprocess.run([ncu, "-i", str(report), *export_args], capture_output=True, text=True, check=False)
    if exp.returncode != 0:
        raise SystemExit(f"ncu could not export {report} ({exp.returncode}):\n{exp.stderr[-2000:]}")
    if not keep:
        report.unlink()
    return exp.stdout
