"""Build notebooks/NN_name.ipynb from its jupytext percent source notebooks/NN_name.py.

The .py files are the sources (reviewable diffs, `# %%` cells, `# %% [markdown]` prose, the papermill
cell tagged `# %% tags=["parameters"]`); the .ipynb are what papermill, run_all.sh and JupyterLab
open. Edit a .py, then run this (tests/test_notebook_sources.py fails while the two disagree).

    python scripts/tooling/build_notebooks.py            # rewrite every .ipynb from its .py
    python scripts/tooling/build_notebooks.py --check    # exit 1 and name the notebooks out of sync
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
    args = ap.parse_args(argv)
    if args.check:
        bad = out_of_sync()
        for name in bad:
            print(f"out of sync: notebooks/{name}.py <-> notebooks/{name}.ipynb "
                  "(run scripts/tooling/build_notebooks.py)")
        return 1 if bad else 0
    for src in sources():
        out = src.with_suffix(".ipynb")
        with atomic_path(out) as tmp:  # an interrupted build leaves each notebook whole
            nbformat.write(build(src), tmp)
        print("wrote", out.relative_to(NOTEBOOKS.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
