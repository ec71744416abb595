"""The notebooks' jupytext percent sources (notebooks/NN_name.py) and the .ipynb built from them
(scripts/tooling/build_notebooks.py) agree cell for cell, so an edit to one without the other fails
here."""
import re
import shutil
from pathlib import Path

import pytest
from script_loader import load_script


ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
build_notebooks = load_script("scripts/tooling/build_notebooks.py")
SOURCES = build_notebooks.sources()


def test_every_notebook_has_a_percent_source():
    nbs = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert len(nbs) >= 8
    assert [p.stem for p in SOURCES] == nbs


def test_every_notebook_is_in_sync_with_its_source():
    assert build_notebooks.out_of_sync() == []


@pytest.mark.parametrize("edit", ["source", "notebook", "tag", "missing"])
def test_the_sync_check_names_a_notebook_edited_on_one_side(edit, tmp_path):
    folder = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", folder, ignore=shutil.ignore_patterns("output"))
    name = SOURCES[0].stem
    src, nb = folder / f"{name}.py", folder / f"{name}.ipynb"
    assert build_notebooks.out_of_sync(folder) == []
    if edit == "source":
        src.write_text(src.read_text() + "\n# %%\nprint('added only to the source')\n")
    elif edit == "notebook":
        nb.write_text(nb.read_text().replace("mode = \\\"auto\\\"", "mode = \\\"replay\\\"", 1))
    elif edit == "tag":
        src.write_text(src.read_text().replace('# %% tags=["parameters"]', "# %%", 1))
    else:
        src.unlink()
    assert build_notebooks.out_of_sync(folder) == [name]


@pytest.mark.parametrize("src", SOURCES, ids=[p.stem for p in SOURCES])
def test_each_notebook_names_its_paper_figures_and_has_a_parameters_cell(src):
    cells = build_notebooks.build(src).cells
    assert cells[0].cell_type == "markdown"
    assert re.search(r"\*\*Reproduces:\*\* .*\b(Fig|Tab|Alg)\. \d+", cells[0].source), cells[0].source[:200]
    params = [c for c in cells if "parameters" in c.metadata.get("tags", ())]
    assert len(params) == 1 and "quick = False" in params[0].source


def test_each_notebook_is_what_a_jupyterlab_save_writes(tmp_path):
    """Open and save every notebook as JupyterLab does with this venv, and no byte of the .ipynb or
    its paired .py changes: jupytext's contents manager reads the pair (adding the format options of
    pyproject.toml's [tool.jupytext]), the kernel sets its spec and language_info, and the save runs
    the venv's pre-save hook (fo_lib/_jupyter.py, registered by scripts/setup_venv.sh)."""
    import jupytext
    from jupyter_client.kernelspec import KernelSpecManager

    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    folder = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", folder, ignore=shutil.ignore_patterns("output"))
    spec = KernelSpecManager().get_kernel_spec("python3")
    cm = jupytext.TextFileContentsManager(root_dir=str(tmp_path),
                                          pre_save_hook="fo_lib._jupyter.drop_kernel_metadata")
    changed = []
    for src in SOURCES:
        path = f"notebooks/{src.stem}.ipynb"
        before = {p: (folder / p).read_bytes() for p in (f"{src.stem}.ipynb", src.name)}
        model = cm.get(path)
        model["content"]["metadata"]["kernelspec"] = {"name": "python3", "display_name": spec.display_name,
                                                      "language": spec.language}
        model["content"]["metadata"]["language_info"] = {"name": "python", "version": "3.x.y"}
        cm.save(model, path)
        changed += [p for p, data in before.items() if (folder / p).read_bytes() != data]
    assert changed == [], "a save in JupyterLab would rewrite these (run scripts/tooling/build_notebooks.py)"


def test_the_notebooks_and_run_all_name_one_kernel():
    """One kernel name everywhere: each notebook's spec, the one run_all.sh's papermill starts, and no
    other that set-up would register."""
    import json
    names = {json.loads(p.read_text())["metadata"]["kernelspec"]["name"] for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
    assert names == {"python3"}
    scripts = (ROOT / "run_all.sh").read_text() + (ROOT / "fo_lib" / "run_all_schedule.py").read_text()
    assert '"-k", "python3"' in scripts and "ipykernel install" not in (ROOT / "scripts" / "setup_venv.sh").read_text()


def test_the_readme_gallery_shows_every_notebooks_main_figure():
    import re
    text = (ROOT / "README.md").read_text()
    gallery = text[text.index("## Notebooks"):]
    gallery = gallery[:gallery.index("\n## ")]
    shown = re.findall(r'<img src="figures/([0-9]{2}_\w+)\.png"', gallery)
    stems = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))
    assert shown == stems  # each once, in order
    assert all((ROOT / "figures" / f"{s}.png").is_file() for s in shown)
    for s in stems:  # and a sentence with the paper figure it reproduces
        assert re.search(rf"\*\*`{s}`\*\* \((Fig|Tab|Alg)\.[^)]*\): \w", gallery), s
