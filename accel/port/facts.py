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
  then provably a device (or backend) and may be rewritten;
- where an ``int`` provably reaches a device position: a literal (``.to(0)``,
  ``map_location=0``), a variable whose every binding in its scope is an ``int`` literal,
  ``int(...)``, ``x % <...>.device_count()``, ``range(...)``'s item or a parameter
  annotated ``int``, or ``self.x`` in
  a class's methods where every ``self.x = ...`` in that class assigns such a value and
  the class body binds no ``x`` itself. torch reads an int
  device as ``cuda:<int>``, which fails on every other device;
- the calls of ``DistributedDataParallel`` (however it is imported) and their lines;
- where a function or class body binds one of the ``torch``/``torch.cuda`` names to
  something else (a parameter ``cuda``, ``torch = ...``): there, and in the functions it
  encloses, the name is not torch's;
- the lines where a name bound to ``torch.cuda`` (``tc``, ``cuda``) is used as a value
  rather than through an attribute (``f(tc)``, ``c = cuda``): worth parsing, to report.

The analysis uses :mod:`ast` (C speed, linear), whose tree costs ~150 bytes per source
byte: above ``ANALYSIS_LIMIT`` characters it is skipped and only the local rules apply.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from typing_extensions import override

ANALYSIS_LIMIT = 1_000_000  # characters: ~150 MB of ast at the limit
Scope = tuple[str, ...]  # () is the module; ("main",) a function; ("Trainer", "step") a method
DEVICE_KEYWORDS = frozenset({"device", "map_location", "device_type", "pin_memory_device"})
# Calls whose first positional argument is a device (or a device type): Tensor/Module.to,
# set_device, torch.device, torch.set_default_device, torch.autocast, torch.amp.GradScaler.
DEVICE_FIRST = frozenset(
    {"to", "set_device", "device", "set_default_device", "autocast", "GradScaler"}
)
INT_DEVICE_KEYWORDS = frozenset({"device", "map_location"})
# torch.cuda functions whose argument at this position (or ``device=``) is a device of any
# kind, where accel's method of the same name takes an index (``device_index``).
DEVICE_ARGUMENT = {
    "synchronize": 0, "memory_allocated": 0, "max_memory_allocated": 0, "memory_reserved": 0,
    "max_memory_reserved": 0, "memory_stats": 0, "reset_peak_memory_stats": 0,
    "get_rng_state": 0, "set_rng_state": 1,
}  # fmt: skip
DDP_NAME = "DistributedDataParallel"


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
    int_device_uses: set[tuple[Scope, str]] = field(default_factory=set[tuple[Scope, str]])
    """(scope of the use, name) of variables that are provably ``int`` where a device
    position uses them."""
    int_attributes: set[tuple[Scope, str]] = field(default_factory=set[tuple[Scope, str]])
    """(class, ``x``) of every ``self.x`` that is provably an ``int`` in that class's methods
    (see the module docstring)."""
    class_scopes: set[Scope] = field(default_factory=set[Scope])
    """The scope of every class the module defines (``("Trainer",)``)."""
    ddp_names: set[str] = field(default_factory=lambda: {DDP_NAME})
    """Names ``DistributedDataParallel`` is called by (``DDP`` after ``import ... as DDP``)."""
    bound_names: set[str] | None = None
    """Every name the module binds anywhere (imports from accel aside); None when the
    module was not analysed, so that any name may be taken."""
    star_import: bool = False
    """Whether a ``from ... import *`` (not from accel) may bind any public name."""
    lines: set[int] = field(default_factory=set[int])
    """Lines holding an int device position or a DDP call: worth parsing though they may
    not mention "cuda"."""
    syntax_error: SyntaxError | None = None
    """Python's own error where the module does not parse (it is then not ported)."""
    shadowed: set[tuple[Scope, str]] = field(default_factory=set[tuple[Scope, str]])
    """(scope, name) where a ``torch``/``torch.cuda`` name means a binding of that scope or
    of an enclosing function that is not torch's (a parameter, an assignment)."""

    def is_torch_name(self, scope: Scope, name: str, *, cuda: bool = False) -> bool:
        """Whether ``name`` used in ``scope`` is this module's ``torch`` (or, with ``cuda``,
        its ``torch.cuda``) there.

        Args:
            scope: Where the name is used (``()`` for the module).
            name: The name.
            cuda: Ask about the names of ``torch.cuda`` instead of ``torch``.

        Returns:
            True when the name is one of those and no local binding shadows it.
        """
        names = self.cuda_names if cuda else self.torch_names
        return name in names and (scope, name) not in self.shadowed

    def local_name(self, name: str) -> str:
        """What the ported module calls accel's ``name`` by: ``name`` itself, or where the
        module may bind it (anywhere, in any scope), the first of ``_accel_<name>``,
        ``_accel_<name>_2``, ... that it does not bind (imported under that alias).

        Args:
            name: A name accel exports, e.g. ``"get_accelerator"``.

        Returns:
            ``name``, or its alias when the module binds ``name``, has a star import, or
            was not analysed.
        """
        bound = self.bound_names
        if bound is not None and name not in bound and not self.star_import:
            return name
        alias, number = f"_accel_{name}", 2
        while bound is not None and alias in bound:
            alias, number = f"_accel_{name}_{number}", number + 1
        return alias

    @property
    def triggers(self) -> tuple[str, ...]:
        """Substrings beyond "cuda" that mark a statement as worth parsing (aliases)."""
        return tuple(f"{name}." for name in sorted(self.cuda_names) if name != "cuda")


def analyse(source: str) -> ModuleFacts:
    """The facts of ``source``; empty (local rules only) if too large or unparsable, with
    Python's own ``SyntaxError`` where it does not parse.

    Args:
        source: A module's source text.

    Returns:
        Its facts; empty ones when it is over ``ANALYSIS_LIMIT`` characters, does not
        parse, or nests too deeply to analyse.
    """
    if len(source) > ANALYSIS_LIMIT:
        return ModuleFacts()
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return ModuleFacts(syntax_error=error)
    except (ValueError, RecursionError, MemoryError):
        return ModuleFacts()  # the rewriter reports the problem with its own position
    facts = ModuleFacts(torch_names=set(), bound_names=set())
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
        # Whether each binding is provably an int: (scope, name) -> kinds of its bindings.
        self.binding_kinds: dict[tuple[Scope, str], set[str]] = {}
        self.int_stores: set[int] = set()  # ids of Name nodes an int is stored to
        # self.x = value: (scope of the method, x, value); resolved in visit_Module.
        self.attribute_stores: list[tuple[Scope, str, ast.expr]] = []
        # (scope, expression, line) of values in int-taking device positions.
        self.int_candidates: list[tuple[Scope, ast.expr, int]] = []
        self.owners: set[int] = set()  # ids of the nodes whose attribute is read
        self.values: list[tuple[Scope, str, int]] = []  # names read as values, and their lines

    # -- imports
    @override
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            bound = alias.asname or alias.name.split(".")[0]
            if alias.name == "torch" or (alias.name.startswith("torch.") and alias.asname is None):
                self.facts.torch_names.add(bound)
                self._bind(bound, kind="torch")
            elif alias.name == "torch.cuda" and alias.asname:
                self.facts.cuda_names.add(bound)
                self._bind(bound, kind="torch")
            else:
                self._bind(bound)

    @override
    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            bound = alias.asname or alias.name
            if node.module == "torch" and alias.name == "cuda":
                self.facts.cuda_names.add(bound)
                self._bind(bound, kind="torch")
            else:
                # What accel port itself imports from accel does not clash with what it adds.
                self._bind(bound, own=node.module != "accel")
            if alias.name == DDP_NAME and alias.asname:
                self.facts.ddp_names.add(alias.asname)
        if any(alias.name == "*" for alias in node.names) and node.module != "accel":
            self.facts.star_import = True

    # -- scopes and bindings
    def _current(self) -> Scope:
        return tuple(self.scope)

    def _bind(self, *names: str, kind: str = "other", own: bool = True) -> None:
        if own and self.facts.bound_names is not None:
            self.facts.bound_names.update(names)
        self.assigned.setdefault(self._current(), set()).update(names)
        for name in names:
            self.binding_kinds.setdefault((self._current(), name), set()).add(kind)

    def _enter(self, name: str, kind: str, node: ast.AST, arguments: ast.arguments | None) -> None:
        self.scope.append(name)
        self.kinds.append(kind)
        self.scope_kinds[self._current()] = list(self.kinds)
        if kind == "class":
            self.facts.class_scopes.add(self._current())
        if arguments is not None:
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            for argument in every:
                annotation = argument.annotation
                is_int = isinstance(annotation, ast.Name) and annotation.id == "int"
                self._bind(argument.arg, kind="int" if is_int else "other")
            self._bind(*(a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None))
        self.generic_visit(node)
        self.scope.pop()
        self.kinds.pop()

    @override
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if self.kinds and self.kinds[-1] == "class":
            self.facts.own_methods.add(node.name)
        self._bind(node.name)
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._enter(node.name, "function", node, node.args)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    @override
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._bind(node.name)
        self._enter(node.name, "class", node, None)

    def _visit_capture(self, node: ast.ExceptHandler | ast.MatchAs | ast.MatchStar) -> None:
        """``except E as name``, ``case P as name``, ``case [*name]``: ``name`` is bound."""
        if node.name is not None:
            self._bind(node.name)
        self.generic_visit(node)

    visit_ExceptHandler = visit_MatchAs = visit_MatchStar = _visit_capture

    @override
    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest is not None:
            self._bind(node.rest)
        self.generic_visit(node)

    @override
    def visit_Global(self, node: ast.Global) -> None:
        self.globals.setdefault(self._current(), set()).update(node.names)

    @override
    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del):
            self._bind(node.id, kind="int" if id(node) in self.int_stores else "other")
        elif id(node) not in self.owners:
            self.values.append((self._current(), node.id, node.lineno))

    @override
    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.owners.add(id(node.value))
        self.generic_visit(node)

    @override
    def visit_Assign(self, node: ast.Assign) -> None:
        if _is_int_literal_or_call(node.value):
            self.int_stores.update(id(t) for t in node.targets if isinstance(t, ast.Name))
        for target in node.targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                self.attribute_stores.append((self._current(), target.attr, node.value))
        self.generic_visit(node)

    @override
    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        value, target = node.value, node.target
        if value is not None and _is_int_literal_or_call(value) and isinstance(target, ast.Name):
            self.int_stores.add(id(target))
        self.generic_visit(node)

    @override
    def visit_For(self, node: ast.For) -> None:
        iterator = node.iter
        if (
            isinstance(node.target, ast.Name)
            and isinstance(iterator, ast.Call)
            and isinstance(iterator.func, ast.Name)
            and iterator.func.id == "range"
        ):
            self.int_stores.add(id(node.target))
        self.generic_visit(node)

    # -- uses
    @override
    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        self._note_cuda_index(node)
        self.generic_visit(node)

    @override
    def visit_BinOp(self, node: ast.BinOp) -> None:
        self._note_cuda_index(node)
        self.generic_visit(node)

    def _note_cuda_index(self, node: ast.expr) -> None:
        # "cuda:" and an index: whether the index is provably an int decides its rewrite.
        index = cuda_index(node)
        if index is not None:
            self.int_candidates.append((self._current(), index, node.lineno))

    @override
    def visit_Call(self, node: ast.Call) -> None:
        self._note_cuda_index(node)
        self._note_int_positions(node)
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
            if name in DEVICE_FIRST:
                self._use(first.id, "device")
            elif name == "init_process_group":
                self._use(first.id, "backend")
        self.generic_visit(node)

    def _note_int_positions(self, node: ast.Call) -> None:
        function = node.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
        candidates = [k.value for k in node.keywords if k.arg in INT_DEVICE_KEYWORDS]
        if node.args and name in ("to", "device", "cuda") and isinstance(function, ast.Attribute):
            candidates.append(node.args[0])
        position = DEVICE_ARGUMENT.get(name)
        if (
            position is not None
            and len(node.args) > position
            and isinstance(function, ast.Attribute)
        ):
            candidates.append(node.args[position])
        for value in candidates:
            self.int_candidates.append((self._current(), value, value.lineno))
        if name in self.facts.ddp_names:
            self.facts.lines.add(node.lineno)

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

    @override
    def visit_Module(self, node: ast.Module) -> None:
        self.generic_visit(node)
        for scope, name, kind in self.uses:
            variables = (
                self.facts.device_variables if kind == "device" else self.facts.backend_variables
            )
            variables.add((self.resolve(scope, name), name))
        self._resolve_ints()
        self._resolve_shadows()

    def _resolve_shadows(self) -> None:
        torch_like = self.facts.torch_names | self.facts.cuda_names
        for scope in self.scope_kinds:
            for name in torch_like:
                owner = self.resolve(scope, name)
                if owner and self.binding_kinds.get((owner, name), set()) - {"torch"}:
                    self.facts.shadowed.add((scope, name))
        for scope, name, line in self.values:
            if self.facts.is_torch_name(scope, name, cuda=True):
                self.facts.lines.add(line)

    def _is_int_name(self, scope: Scope, name: str) -> bool:
        kinds = self.binding_kinds.get((self.resolve(scope, name), name), set())
        return kinds == {"int"}

    def _resolve_ints(self) -> None:
        # self.x is the class's: an attribute of one class says nothing of another's self.x
        # (a property or class attribute of the same name there). A name the class body
        # binds itself (a method, a property, a class attribute) is not provably an int.
        stores: dict[tuple[Scope, str], list[tuple[Scope, ast.expr]]] = {}
        for scope, attribute, value in self.attribute_stores:
            owner = class_of(scope, self.facts.class_scopes)
            stores.setdefault((owner, attribute), []).append((scope, value))
        for (owner, attribute), values in stores.items():
            if attribute not in self.assigned.get(owner, set()) and all(
                _is_int_literal_or_call(value)
                or (isinstance(value, ast.Name) and self._is_int_name(scope, value.id))
                for scope, value in values
            ):
                self.facts.int_attributes.add((owner, attribute))
        for scope, value, line in self.int_candidates:
            if _is_int_literal_or_call(value):
                self.facts.lines.add(line)
            elif isinstance(value, ast.Name) and self._is_int_name(scope, value.id):
                self.facts.int_device_uses.add((scope, value.id))
                self.facts.lines.add(line)
            elif (
                isinstance(value, ast.Attribute)
                and isinstance(value.value, ast.Name)
                and value.value.id == "self"
                and (class_of(scope, self.facts.class_scopes), value.attr)
                in self.facts.int_attributes
            ):
                self.facts.lines.add(line)


def class_of(scope: Scope, class_scopes: set[Scope]) -> Scope:
    """The innermost class around ``scope``: the class whose instance a method's ``self`` is.

    Args:
        scope: A scope of the module (``("Trainer", "step")``).
        class_scopes: The module's classes (:attr:`ModuleFacts.class_scopes`).

    Returns:
        That class's scope (``("Trainer",)``), or ``()`` when no class encloses ``scope``.
    """
    for depth in range(len(scope), 0, -1):
        if scope[:depth] in class_scopes:
            return scope[:depth]
    return ()


def _is_int_literal(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Constant) and type(node.value) is int  # not a bool
    )


def _is_int_literal_or_call(node: ast.expr) -> bool:
    """An int literal, ``int(...)``, or ``x % <...>.device_count()`` (the index of a rank's
    device, as the DDP tutorial writes it): an int wherever it is assigned (``x % n`` with
    ``n`` an int is an int unless ``x`` is a float, which no device position takes)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        divisor = node.right
        return (
            isinstance(divisor, ast.Call)
            and isinstance(divisor.func, ast.Attribute)
            and divisor.func.attr == "device_count"
            and not divisor.args
        )
    return _is_int_literal(node) or (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "int"
    )


PERCENT_FORMATS = frozenset({"cuda:%d", "cuda:%i", "cuda:%s"})
BRACE_FORMATS = frozenset({"cuda:{}", "cuda:{0}", "cuda:{!s}", "cuda:{0!s}"})


def cuda_index(node: ast.expr) -> ast.expr | None:
    """The index of a string that names a CUDA device by one.

    Args:
        node: Any expression.

    Returns:
        ``x`` where ``node`` is ``f"cuda:{x}"``, ``"cuda:%d" % x``, ``"cuda:{}".format(x)``
        or ``"cuda:" + str(x)``; else None.
    """
    if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
        text, value = node.values
        if (
            isinstance(text, ast.Constant)
            and text.value == "cuda:"
            and isinstance(value, ast.FormattedValue)
            and value.conversion == -1
            and value.format_spec is None
        ):
            return value.value
    if isinstance(node, ast.BinOp) and isinstance(node.left, ast.Constant):
        left = node.left.value
        if isinstance(node.op, ast.Mod) and left in PERCENT_FORMATS:
            return node.right if not isinstance(node.right, ast.Tuple) else None
        right = node.right
        if (
            isinstance(node.op, ast.Add)
            and left == "cuda:"
            and isinstance(right, ast.Call)
            and isinstance(right.func, ast.Name)
            and right.func.id == "str"
            and len(right.args) == 1
            and not right.keywords
        ):
            return right.args[0]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant)
        and node.func.value.value in BRACE_FORMATS
        and len(node.args) == 1
        and not node.keywords
        and not isinstance(node.args[0], ast.Starred)
    ):
        return node.args[0]
    return None
