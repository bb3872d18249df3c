"""What ``accel port`` needs to know about a whole module before rewriting its statements.

- the names bound to ``torch`` and to ``torch.cuda`` (``import torch as th``,
  ``from torch import cuda``, ``import torch.cuda as tc``);
- the method names the module's own classes define (``cuda``, ``pin_memory``,
  ``is_cuda`` of a custom batch type are then not rewritten on unknown receivers);
- which variables reach a device position (``.to(x)``, ``device=x``, ``torch.device(x)``,
  ``set_device(x)``, ``map_location=x``, ``device_type=x``) or a collectives-backend
  position (``init_process_group(x)``, ``backend=x``), resolved with Python's scoping rules
  (a function's own assignments, then enclosing functions, then the module; class bodies
  are not visible from methods). A literal assigned to such a variable in that scope is
  then provably a device (or backend) and may be rewritten.

The analysis uses :mod:`ast` (C speed, linear), whose tree costs ~150 bytes per source
byte: above ``ANALYSIS_LIMIT`` characters it is skipped and only the local rules apply.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

ANALYSIS_LIMIT = 1_000_000  # characters: ~150 MB of ast at the limit
Scope = tuple[str, ...]  # () is the module; ("main",) a function; ("Trainer", "step") a method
DEVICE_KEYWORDS = frozenset({"device", "map_location", "device_type"})


@dataclass
class ModuleFacts:
    """See the module docstring. Empty facts mean: local rules only."""

    torch_names: set[str] = field(default_factory=lambda: {"torch"})
    cuda_names: set[str] = field(default_factory=set[str])
    device_variables: set[tuple[Scope, str]] = field(default_factory=set[tuple[Scope, str]])
    backend_variables: set[tuple[Scope, str]] = field(default_factory=set[tuple[Scope, str]])
    own_methods: set[str] = field(default_factory=set[str])
    """Names of methods (and properties) the module's own classes define: ``x.cuda()`` is
    not provably a tensor's or a module's where the module defines a ``cuda`` of its own."""

    @property
    def triggers(self) -> tuple[str, ...]:
        """Substrings beyond "cuda" that mark a statement as worth parsing (aliases)."""
        return tuple(f"{name}." for name in sorted(self.cuda_names) if name != "cuda")


def analyse(source: str) -> ModuleFacts:
    """The facts of ``source``; empty (local rules only) if too large or unparsable."""
    if len(source) > ANALYSIS_LIMIT:
        return ModuleFacts()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ModuleFacts()  # the rewriter reports the problem with its own position
    facts = ModuleFacts(torch_names=set())
    try:
        _Collector(facts).visit(tree)
    except RecursionError:  # nesting deeper than the visitor recurses: local rules only
        return ModuleFacts()
    if not facts.torch_names and not facts.cuda_names:
        facts.torch_names.add("torch")  # no import seen (a fragment): assume the usual name
    return facts


class _Collector(ast.NodeVisitor):
    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.scope: list[str] = []
        self.kinds: list[str] = []  # "function" or "class", parallel to scope
        self.assigned: dict[Scope, set[str]] = {(): set()}
        self.globals: dict[Scope, set[str]] = {}
        self.uses: list[tuple[Scope, str, str]] = []  # (scope, name, "device"/"backend")
        self.scope_kinds: dict[Scope, list[str]] = {}

    # -- imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "torch" or (alias.name.startswith("torch.") and alias.asname is None):
                self.facts.torch_names.add(alias.asname or "torch")
            elif alias.name == "torch.cuda" and alias.asname:
                self.facts.cuda_names.add(alias.asname)
        self._bind(*(a.asname or a.name.split(".")[0] for a in node.names))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "torch":
            for alias in node.names:
                if alias.name == "cuda":
                    self.facts.cuda_names.add(alias.asname or "cuda")
        self._bind(*(a.asname or a.name for a in node.names))

    # -- scopes and bindings
    def _current(self) -> Scope:
        return tuple(self.scope)

    def _bind(self, *names: str) -> None:
        self.assigned.setdefault(self._current(), set()).update(names)

    def _enter(self, name: str, kind: str, node: ast.AST, arguments: ast.arguments | None) -> None:
        self.scope.append(name)
        self.kinds.append(kind)
        self.scope_kinds[self._current()] = list(self.kinds)
        if arguments is not None:
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
            self._bind(*(a.arg for a in every))
        self.generic_visit(node)
        self.scope.pop()
        self.kinds.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if self.kinds and self.kinds[-1] == "class":
            self.facts.own_methods.add(node.name)
        self._bind(node.name)
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._enter(node.name, "function", node, node.args)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._bind(node.name)
        self._enter(node.name, "class", node, None)

    def visit_Global(self, node: ast.Global) -> None:
        self.globals.setdefault(self._current(), set()).update(node.names)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del):
            self._bind(node.id)

    # -- uses
    def visit_Call(self, node: ast.Call) -> None:
        for keyword in node.keywords:
            if isinstance(keyword.value, ast.Name):
                if keyword.arg in DEVICE_KEYWORDS:
                    self._use(keyword.value.id, "device")
                elif keyword.arg == "backend":
                    self._use(keyword.value.id, "backend")
        first = node.args[0] if node.args else None
        if isinstance(first, ast.Name):
            function = node.func
            name = (
                function.attr
                if isinstance(function, ast.Attribute)
                else getattr(function, "id", "")
            )
            if name in ("to", "set_device", "device"):
                self._use(first.id, "device")
            elif name == "init_process_group":
                self._use(first.id, "backend")
        self.generic_visit(node)

    def _use(self, name: str, kind: str) -> None:
        self.uses.append((self._current(), name, kind))

    def resolve(self, scope: Scope, name: str) -> Scope:
        """The scope whose binding of ``name`` a use in ``scope`` sees."""
        if name in self.globals.get(scope, set()):
            return ()
        kinds = self.scope_kinds.get(scope, [])
        for depth in range(len(scope), 0, -1):
            # The scope itself counts whatever its kind; enclosing class bodies do not.
            if depth < len(scope) and kinds[depth - 1] == "class":
                continue
            if name in self.assigned.get(scope[:depth], set()):
                return scope[:depth]
        return ()

    def visit_Module(self, node: ast.Module) -> None:
        self.generic_visit(node)
        for scope, name, kind in self.uses:
            variables = (
                self.facts.device_variables if kind == "device" else self.facts.backend_variables
            )
            variables.add((self.resolve(scope, name), name))
