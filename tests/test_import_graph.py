"""accel's modules import each other downhill: no import cycle anywhere inside accel/.

Every import counts, at module level or inside a function (a lazy import is still an
arrow), except those under ``if TYPE_CHECKING:``, which never run. A package's parent is
not an arrow: Python imports it first whatever the module says.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import accel

ROOT = pathlib.Path(accel.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            pending.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _package_of(name: str, path: pathlib.Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def import_graph() -> dict[str, set[str]]:
    """module -> the accel modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    package = _package_of(name, path).split(".")
                    anchor = ".".join(package[: len(package) - node.level + 1])
                    base = f"{anchor}.{base}" if base else anchor
                # `from package import module` names the module; anything else the package.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_inside_accel_imports_itself_back() -> None:
    graph = import_graph()
    assert "accel.comm.process_group" in graph["accel.process_group"]  # the graph sees arrows
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_lazy_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse("if TYPE_CHECKING:\n    import x\ndef f():\n    import y\n")
    names = [
        alias.name
        for node in _imports(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    assert names == ["y"]


@pytest.mark.slow  # starts an interpreter
def test_import_accel_loads_no_framework() -> None:
    """Frameworks are imported by their integration only: ``import accel`` (and the pieces
    a framework's spec or process group needs) never pays for Lightning or transformers."""
    import subprocess
    import sys

    code = (
        "import sys, accel, accel.process_group, accel.integrations.transformers, accel.cli;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'lightning', 'transformers',"
        " 'pytorch_lightning', 'deepspeed'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.slow  # starts an interpreter
def test_selecting_a_backend_imports_no_host_or_metadata_readers_it_does_not_need() -> None:
    """``get_accelerator()`` after ``import torch`` reads no memory figure (psutil), parses
    no distribution's metadata file (only ``accel report`` names distributions) and makes
    no op builder (the catalog is read on the first op lookup)."""
    import subprocess
    import sys

    code = (
        "import sys, torch, importlib.metadata as md;"
        "parsed = [];"
        "read = md.PathDistribution.metadata.fget;"
        "md.PathDistribution.metadata = property(lambda d: parsed.append(1) or read(d));"
        "import accel; accel.get_accelerator();"
        "unneeded = ('psutil', 'accel.ops.catalog', 'accel.ops.prebuilt');"
        "print(*[name for name in unneeded if name in sys.modules], len(parsed))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.split() == ["0"], result.stdout
