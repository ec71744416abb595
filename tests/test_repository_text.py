"""What a reader of the repository meets speaks of the project only, and names what exists.

* No words about how the work was organised (numbered issues, sessions, device calls, their
  scripts, a dated log) in the package, scripts, notebooks, tests, README or docs: a comment cites a
  decision by its heading in docs/decisions.md.
* Every repository path and every ``fo_lib.*`` dotted name in the docs, comments and docstrings
  exists.
"""
import ast
import importlib
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AREAS = ("fo_lib", "scripts", "notebooks", "tests", "docs", "README.md")
TEXT_SUFFIXES = {".py", ".md", ".cuh", ".sh", ".toml", ".yml", ""}

# Numbered process words ("issue 23", "session 9", "call 27", "call27.sh", "turn 3"), and the dated
# log they lived in.
PROCESS_WORDS = re.compile(
    r"\b(?:issues?\s*#?\d+|sessions?\s+\d+|calls?\s?\d+(?:\.sh)?\b|turns?\s+\d+)|perf-log|perf log"
    r"|\b(?:this|next|last|previous|an earlier|a later) session\b|the issue's",
    re.IGNORECASE)

# A repository path: a top-level folder, then a name ending in a known suffix or a slash.
PATH = re.compile(r"(?<![\w./<-])((?:fo_lib|scripts|tests|notebooks|docs|data|figures)/[\w./-]*[\w/])")
DOTTED = re.compile(r"(?<![\w.])(fo_lib(?:\.[A-Za-z_]\w*)+)")


def tracked_files(areas=AREAS) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--", *areas], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return [ROOT / p for p in out if Path(p).suffix in TEXT_SUFFIXES and (ROOT / p).is_file()]


def prose(path: Path) -> str:
    """The parts of a file written for a reader: a Markdown file whole; in Python, comments and
    docstrings; in CUDA and shell, comments."""
    text = path.read_text(errors="replace")
    if path.suffix == ".md":
        return text
    if path.suffix == ".py":
        parts = [tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                 if tok.type == tokenize.COMMENT]
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return "\n".join(parts)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    parts.append(doc)
        return "\n".join(parts)
    if path.suffix == ".cuh":
        return "\n".join(re.findall(r"//[^\n]*|/\*.*?\*/", text, re.DOTALL))
    return "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))


def process_words(text: str) -> list[str]:
    return [m.group(0) for m in PROCESS_WORDS.finditer(text)]


def dead_paths(text: str, root: Path = ROOT) -> list[str]:
    dead = []
    for m in PATH.finditer(text):
        path = m.group(1).rstrip(".")
        after, before = text[m.end():m.end() + 2], text[max(0, m.start() - 12):m.start()]
        if after[:1] in ("<", "{", "*", "[") or after == ".*" or re.search(r"NN|<|\{", path):
            continue  # a pattern (data/<gpu>/..., notebooks/NN_name.py, data/x/*.csv), not a path
        if re.search(r"--out(?:-dir|puts)?[ =]$", before):
            continue  # what a command will write, or read from what another wrote
        if not (root / path).exists():
            dead.append(path)
    return dead


def dead_names(text: str) -> list[str]:
    dead = []
    for name in {m.group(1).rstrip(".") for m in DOTTED.finditer(text)}:
        if not resolves(name):
            dead.append(name)
    return sorted(dead)


def resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _report(found: dict) -> str:
    return "\n".join(f"{path.relative_to(ROOT)}: {', '.join(map(repr, items))}" for path, items in found.items())


def test_the_project_speaks_of_itself_only():
    found = {p: w for p in tracked_files() if p != Path(__file__) and (w := process_words(p.read_text(errors="replace")))}
    assert not found, "words about how the work was organised; cite a decision's heading instead:\n" + _report(found)


def test_every_path_named_in_prose_exists():
    found = {p: d for p in tracked_files() if (d := dead_paths(prose(p)))}
    assert not found, "paths that do not exist:\n" + _report(found)


def test_every_fo_lib_name_in_prose_exists():
    found = {p: d for p in tracked_files() if (d := dead_names(prose(p)))}
    assert not found, "fo_lib names that do not exist:\n" + _report(found)


def test_every_script_is_described_in_the_scripts_readme():
    readme = (ROOT / "scripts" / "README.md").read_text()
    scripts = [p for p in tracked_files(("scripts",)) if p.name != "README.md"]
    assert scripts
    missing = [str(p.relative_to(ROOT)) for p in scripts if f"`{p.name}`" not in readme]
    assert not missing, f"scripts/README.md does not describe {missing}"


RECORD = re.compile(r"data/[a-z0-9x]+(?:-quick)?/(?:[a-z0-9_]+/)?[\w.-]+\.(?:csv|json|md)")


def test_data_holds_only_records_with_their_provenance():
    """Under data/: records (CSV or JSON, each with its ``.meta.json`` sidecar) and READMEs, in
    ``data/<gpu>[-quick]/`` or one topic folder inside it; no run logs, scripts or patches."""
    files = subprocess.run(["git", "ls-files", "data"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    assert files
    assert not [f for f in files if not RECORD.fullmatch(f)], "not a record"
    records = [f for f in files if f.endswith((".csv", ".json")) and not f.endswith(".meta.json")]
    assert not [f for f in records if f"{f.rsplit('.', 1)[0]}.meta.json" not in files], "no sidecar"


# --- the checks catch what they are for ------------------------------------------------------------
@pytest.mark.parametrize("words", [
    "fixed in " + "issue 23", "see " + "Issue #7", "measured in " + "session 9", "the " + "call 27 logs",
    "call" + "29.sh", "docs/" + "perf-log.md", "the " + "next session", "the " + "issue's bar"])
def test_process_words_are_caught(words):
    assert process_words(f"# {words}: numbers\n")


@pytest.mark.parametrize("text", ["a call to the kernel", "two calls of 3 ms", "the sessions of JupyterLab",
                                  "issue the copy", "each call's 2 groups"])
def test_ordinary_words_are_not_caught(text):
    assert not process_words(text)


def test_dead_references_are_caught(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "here.py").write_text("")
    text = ("runs scripts/here.py, then scripts/gone.py; data/<gpu>/x.csv and data/x/*.csv are patterns; "
            "`--out data/new.csv` is written")
    assert dead_paths(text, tmp_path) == ["scripts/gone.py"]
    assert dead_names("see fo_lib.tiling.TileGrid and fo_lib.tiling.NoSuchThing, fo_lib.nomodule") == \
        ["fo_lib.nomodule", "fo_lib.tiling.NoSuchThing"]


def test_prose_is_comments_and_docstrings(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('"""Module doc: fo_lib.a."""\nx = "fo_lib.code_string"  # comment: fo_lib.b\n'
                   'def f():\n    """Function doc: fo_lib.c."""\n')
    text = prose(src)
    assert "fo_lib.a" in text and "fo_lib.b" in text and "fo_lib.c" in text
    assert "code_string" not in text
