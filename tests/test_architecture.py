"""The package's shape, checked on the source: no import cycle among fo_lib modules (imports at any
depth count, including those inside functions: a cycle there still ties the layers together), and
no module or CUDA header longer than a reader can hold."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "fo_lib"
MAX_LINES = 400
def _module_name(path: Path) -> str:
    parts = ("fo_lib",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    """The fo_lib modules that ``name`` imports anywhere in its source. ``from X import n`` counts
    as importing ``X.n`` when that is a module, else ``X``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            # ``import a.b.c`` binds the module a.b.c; the longest known prefix is the module meant.
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_import_graph_resolves_relative_imports():
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    assert "fo_lib.tiling" in graph["fo_lib.reorder"] or "fo_lib.tiling" in set().union(*graph.values())
    assert all(dep in MODULES for deps in graph.values() for dep in deps)


def test_no_import_cycle_among_fo_lib_modules():
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_module_is_too_long():
    too_long = {str(p.relative_to(ROOT)): n for p in MODULES.values()
                if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"


def test_no_cuda_header_is_too_long_and_every_one_is_where_nvrtc_finds_it():
    """The kernels' headers by role (fo_lib/cuda/*.cuh, flat: the JIT hands NVRTC that folder's
    headers and hashes them into its cache key), each short enough to read, each include one of them."""
    import re

    cuda = ROOT / "cuda"
    headers = {p.name for p in cuda.glob("*.cuh")}
    assert not [p for p in cuda.rglob("*") if p.is_file() and p.parent != cuda], "headers in a subfolder"
    too_long = {name: n for name in headers if (n := len((cuda / name).read_text().splitlines())) > MAX_LINES}
    assert not too_long, f"headers over {MAX_LINES} lines: {too_long}"
    for name in headers:
        for inc in re.findall(r'#include\s+"([^"]+)"', (cuda / name).read_text()):
            assert inc in headers, f"{name} includes {inc}, not a header of fo_lib/cuda"


def test_the_plan_delegates_to_its_layout():
    """OverlapPlan validates, builds and delegates: its class body stays short, and which primitive
    it runs never branches its code (each primitive's detail lives in one buffer layout)."""
    path = ROOT / "engine" / "plan.py"
    tree = ast.parse(path.read_text())
    plan = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "OverlapPlan")
    assert plan.end_lineno - plan.lineno + 1 <= 300
    for node in ast.walk(plan):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            names = {n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", None) for n in ast.walk(node.test)}
            chained = bool(node.orelse) and isinstance(node.orelse[0], ast.If)
            assert not ("primitive" in names and chained), f"per-primitive if/elif chain at line {node.lineno}"
