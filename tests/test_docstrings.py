"""The API reference documents every parameter: each public function or method that takes
parameters has a Google-style ``Args:`` section naming all of them, and no other.

"Public" is what mkdocstrings renders: no leading underscore on the name, the class or any
module on the path. Methods marked ``@override`` are left out: the base they override
documents them, and the type checkers hold the two together.
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "accel"

# "name (type): text" or "name: text" at the start of an Args entry; *args/**kwargs too.
_ENTRY = re.compile(r"^\s*\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:")


def _public_modules() -> list[pathlib.Path]:
    modules = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if not any(part.startswith("_") and part != "__init__" for part in parts):
            modules.append(path)
    return modules


def _documented_parameters(docstring: str) -> set[str]:
    """The names the ``Args:`` section lists (entries are indented one level below it)."""
    names: set[str] = set()
    lines = docstring.splitlines()
    for index, line in enumerate(lines):
        if line.strip() != "Args:":
            continue
        heading_indent = len(line) - len(line.lstrip())
        entry_indent: int | None = None
        for entry in lines[index + 1 :]:
            if not entry.strip():
                continue
            indent = len(entry) - len(entry.lstrip())
            if indent <= heading_indent:
                break
            entry_indent = indent if entry_indent is None else entry_indent
            match = _ENTRY.match(entry)
            if indent == entry_indent and match:
                names.add(match.group(1))
    return names


def _is_override(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(ast.unparse(decorator).endswith("override") for decorator in function.decorator_list)


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    arguments = function.args
    names = [a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
    names += [a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return [name for name in names if name not in ("self", "cls")]


def _undocumented(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    problems = []

    def visit(body: list[ast.stmt], owner: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                visit(node.body, f"{owner}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name.startswith("_") or _is_override(node):
                    continue
                documented = _documented_parameters(ast.get_docstring(node) or "")
                parameters = set(_parameters(node))
                where = f"{path.relative_to(root)}:{node.lineno} {owner}{node.name}"
                if missing := parameters - documented:
                    problems.append(f"{where}: no Args entry for {', '.join(sorted(missing))}")
                if stale := documented - parameters:
                    problems.append(f"{where}: Args names no parameter {', '.join(sorted(stale))}")

    visit(ast.parse(path.read_text()).body, "")
    return problems


def test_every_public_function_documents_each_parameter() -> None:
    modules = _public_modules()
    assert len(modules) > 50, modules  # the walk found the package
    problems = [problem for path in modules for problem in _undocumented(path)]
    assert not problems, "\n".join(problems)


def test_the_check_finds_parameters_left_out_and_entries_for_none(tmp_path: pathlib.Path) -> None:
    source = '''
def documented(size: int, *, name: str) -> None:
    """Do a thing.

    Args:
        size: How many.
        name (str): What to call it; a long description
            that wraps onto a second line naming other: things.
    """


def half_documented(size: int, count: int) -> None:
    """Do a thing.

    Args:
        size: How many.
    """


class Public:
    def method(self, value: float) -> None:
        """No sections."""


def renamed(count: int) -> None:
    """Do a thing.

    Args:
        size: The parameter's old name.
        count: How many.
    """
'''
    path = tmp_path / "example.py"
    path.write_text(source)
    problems = [p.split(": ", 1)[1] for p in _undocumented(path, root=tmp_path)]
    assert problems == [
        "no Args entry for count",
        "no Args entry for value",
        "Args names no parameter size",
    ]
