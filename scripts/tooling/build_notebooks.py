"""Build notebooks/NN_name.ipynb from its jupytext percent source notebooks/NN_name.py.

The .py files are the sources (reviewable diffs, `# %%` cells, `# %% [markdown]` prose, the papermill
cell tagged `# %% tags=["parameters"]`); the .ipynb are what papermill, run_all.sh and JupyterLab
open. Edit a .py, then run this (tests/test_notebook_sources.py fails while the two disagree).

    python scripts/tooling/build_notebooks.py            # rewrite every .ipynb from its .py
    python scripts/tooling/build_notebooks.py --outputs notebooks/output   # with the replay's outputs
    python scripts/tooling/build_notebooks.py --check    # exit 1 and name the notebooks out of sync

The committed notebooks carry outputs, so that a visitor sees the results without running anything:
those of the replay on recorded data (``./run_all.sh --mode replay`` writes the executed copies into
its ``--output`` folder), reduced to what reads the same on every run (:func:`committed_outputs`). A
rebuild without ``--outputs`` keeps each cell's committed outputs while its source is unchanged.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext
import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fo_lib._util import atomic_path  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
# The kernel spec as JupyterLab rewrites it on opening a notebook (ipykernel's own python3 spec), so
# that opening and saving a notebook changes no byte (its language_info is dropped on save by
# fo_lib/_jupyter.py, which scripts/setup_venv.sh registers).
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def jupytext_metadata(src: Path) -> dict:
    """What jupytext's contents manager adds to a paired notebook it opens: the format options of the
    project's [tool.jupytext] (pyproject.toml), e.g. notebook_metadata_filter."""
    from jupytext.config import load_jupytext_config

    options: dict = {}
    config = load_jupytext_config(str(src))
    if config is not None:
        config.set_default_format_options(options, read=True)
    return options


# A cell tagged "live" shows something of this run (a wall-clock timing, an interactive widget): its
# outputs are never committed.
LIVE_TAG = "live"
# What an output keeps: images and text. Widget views need their kernel (a saved one shows an error),
# stderr carries progress bars and warnings naming this machine's paths.
KEEP_DATA = ("image/png", "text/html", "text/markdown", "text/plain")
WIDGET = "application/vnd.jupyter.widget-view+json"


def committed_outputs(cell) -> list:
    """The outputs of an executed code ``cell`` as committed: stdout and the images and text it
    displayed (results as displays, so without execution counts), nothing of a live cell, the
    parameters cells, a widget or stderr; an error output raises."""
    tags = set(cell.get("metadata", {}).get("tags", ()))
    if cell.cell_type != "code" or tags & {LIVE_TAG, "parameters", "injected-parameters"}:
        return []
    out = []
    for o in cell.get("outputs", []):
        if o.output_type == "error":
            raise ValueError(f"cell {cell.get('id')} ended in {o.ename}: {o.evalue}")
        if o.output_type == "stream":
            if o.name == "stdout" and o.text.strip():
                out.append(nbformat.v4.new_output("stream", name="stdout", text=o.text))
            continue
        if WIDGET in o.get("data", {}):
            continue
        data = {k: v for k, v in o.get("data", {}).items() if k in KEEP_DATA}
        if data:
            meta = {k: v for k, v in o.get("metadata", {}).items() if k in KEEP_DATA}
            out.append(nbformat.v4.new_output("display_data", data=data, metadata=meta))
    return out


def with_outputs(nb, outputs: dict) -> nbformat.NotebookNode:
    """``nb`` with ``outputs`` (cell id -> outputs) on its code cells, no execution counts."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            live = LIVE_TAG in cell.metadata.get("tags", ())  # as the source tags it now
            cell.outputs = [] if live else outputs.get(cell.id, [])
            cell.execution_count = None
    return nb


def executed_outputs(executed: Path) -> dict:
    """Cell id -> committed outputs, from an executed copy of a notebook (papermill keeps the ids)."""
    return executed_outputs_of(nbformat.read(executed, as_version=4))


def executed_outputs_of(done) -> dict:
    """:func:`executed_outputs` of an executed notebook already read: cell id -> ``(source, outputs)``."""
    return {c.id: (c.source, committed_outputs(c)) for c in done.cells if c.cell_type == "code" and "id" in c}


def matching(built, executed: dict) -> dict:
    """Cell id -> outputs of ``executed`` (:func:`executed_outputs_of`) for the cells of ``built``
    whose source it ran (an executed copy older than a cell's edit gives that cell none)."""
    return {c.id: executed[c.id][1] for c in built.cells
            if c.cell_type == "code" and c.id in executed and executed[c.id][0] == c.source}


def kept_outputs(src: Path, built) -> dict:
    """Cell id -> outputs of the committed notebook beside ``src``, for cells whose source is unchanged."""
    path = src.with_suffix(".ipynb")
    if not path.exists():
        return {}
    old = {c.id: c for c in nbformat.read(path, as_version=4).cells if "id" in c}
    return {c.id: old[c.id].get("outputs", []) for c in built.cells
            if c.cell_type == "code" and c.id in old and old[c.id].source == c.source}


def sources(folder: Path = NOTEBOOKS) -> list[Path]:
    return sorted(folder.glob("[0-9][0-9]_*.py"))


def build(src: Path) -> nbformat.NotebookNode:
    """The notebook of one percent source, with stable cell ids (rebuilding changes no byte)."""
    nb = jupytext.read(src, fmt="py:percent")
    nb.metadata = {"kernelspec": dict(KERNELSPEC)}
    options = jupytext_metadata(src)
    if options:
        nb.metadata["jupytext"] = options
    prefix = src.stem.split("_")[0]
    for i, cell in enumerate(nb.cells):
        cell.id = f"{prefix}-{i:02d}"
        cell.metadata.pop("lines_to_next_cell", None)  # a jupytext layout hint, not content
    return nb


def cell_content(nb: nbformat.NotebookNode) -> list[tuple[str, str, tuple[str, ...]]]:
    """What must agree between a source and its notebook: each cell's type, source and tags."""
    return [(c.cell_type, c.source, tuple(c.metadata.get("tags", ()))) for c in nb.cells]


def out_of_sync(folder: Path = NOTEBOOKS) -> list[str]:
    """Names of notebooks whose .ipynb differs from its .py, or that lack one of the pair."""
    srcs = {p.stem for p in sources(folder)}
    nbs = {p.stem for p in folder.glob("[0-9][0-9]_*.ipynb")}
    bad = sorted((srcs ^ nbs))
    for name in sorted(srcs & nbs):
        built = build(folder / f"{name}.py")
        on_disk = nbformat.read(folder / f"{name}.ipynb", as_version=4)
        if cell_content(built) != cell_content(on_disk):
            bad.append(name)
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report notebooks out of sync (exit 1 if any)")
    ap.add_argument("--outputs", type=Path, help="a folder of executed notebooks (run_all.sh's --output folder) "
                    "whose outputs the committed notebooks take")
    args = ap.parse_args(argv)
    if args.check:
        bad = out_of_sync()
        for name in bad:
            print(f"out of sync: notebooks/{name}.py <-> notebooks/{name}.ipynb "
                  "(run scripts/tooling/build_notebooks.py)")
        return 1 if bad else 0
    for src in sources():
        out = src.with_suffix(".ipynb")
        nb = build(src)
        executed = args.outputs / out.name if args.outputs else None
        if executed is not None and not executed.exists():
            print(f"no executed {executed}: {out.name} keeps its outputs", file=sys.stderr)
            executed = None
        if executed:
            ran = executed_outputs(executed)
            got = matching(nb, ran)
            stale = [c.id for c in nb.cells if c.cell_type == "code" and c.id in ran and c.id not in got]
            if stale:
                print(f"{out.name}: cells {', '.join(stale)} changed since {executed} ran: no outputs for them",
                      file=sys.stderr)
        nb = with_outputs(nb, got if executed else kept_outputs(src, nb))
        with atomic_path(out) as tmp:  # an interrupted build leaves each notebook whole
            nbformat.write(nb, tmp)
        print("wrote", out.relative_to(NOTEBOOKS.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
