"""The API reference documents every parameter, and each contract once.

Each public function or method that takes parameters has a Google-style ``Args:`` section
naming all of them, and no other. "Public" is what mkdocstrings renders: no leading
underscore on the name, the class or any module on the path. Methods marked ``@override``
are left out: the base they override documents them, and the type checkers hold the two
together.

A member whose contract a capability protocol declares is documented there only: a class
that implements it names the protocol in ``@implements(...)`` (which shows the contract on
the implementation at run time) and its own docstring, if any, says what it adds or
changes, with no ``Args:``/``Returns:``/``Raises:`` of its own (a copy of the contract,
verbatim or drifted) and not the protocol's summary again.
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "accel"

PROTOCOLS = PACKAGE / "protocols"
# Classes (by name) and modules (by path) whose public members keep a contract written
# outside accel: each documents only where it differs from it (DeepSpeed's abstract
# accelerator documents none of its members; DeepSpeed's CUDA backend and its docs are the
# contract; DeepSpeed's compiled op modules are the contract of their stand-ins).
FOREIGN_CONTRACTS = {
    "AccelDeepSpeedAccelerator": "DeepSpeedAccelerator",
    "accel/integrations/deepspeed/aio.py": "deepspeed.ops.aio",
    "CPUAdamKernels": "deepspeed.ops.adam.cpu_adam",
    "CPUAdagradKernels": "deepspeed.ops.adagrad.cpu_adagrad",
    "CPULionKernels": "deepspeed.ops.lion.cpu_lion",
    "FusedAdamKernels": "deepspeed.ops.adam.fused_adam",
    "FusedLionKernels": "deepspeed.ops.lion.fused_lion",
    "ShmCommKernels": "deepspeed.ops.comm",
}
# Where implementations live: a class here that defines a protocol's member names it.
IMPLEMENTATIONS = (PACKAGE / "mixins", PACKAGE / "backends")

# "name (type): text" or "name: text" at the start of an Args entry; *args/**kwargs too.
_ENTRY = re.compile(r"^\s*\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:")
# A Google-style section that states a contract.
_CONTRACT_SECTION = re.compile(r"^\s*(Args|Arguments|Returns|Yields|Raises):\s*$", re.MULTILINE)

Function = ast.FunctionDef | ast.AsyncFunctionDef

# Parameters documented once, by a convention in a module docstring (accel.protocols:
# an optional device index; accel.functions: its device argument and the accelerator it
# acts on; accel.comm: the group and the timeout; accel.ops.cpu_optim: the tensors and
# steps of a step; accel.testing.checks: the backend): they
# need no Args entry, and an entry that only restates one is a copy.
# (parameter, annotation) -> (the modules or folders it holds in, or None for all; its
# restatement)
_CONVENTIONS = {
    ("device_index", "int | None"): (
        None,
        "device_index: The device; ``None`` for the current one.",
    ),
    ("device_index", "DeviceLike | None"): ("accel/functions.py", ""),
    ("accelerator", "Accelerator | None"): (
        "accel/functions.py",
        "accelerator: The accelerator; ``None`` for :func:`~accel.get_accelerator`'s.",
    ),
    # accel.comm: the process group, and a collective's timeout.
    ("group", "dist.ProcessGroup | None"): (
        "accel/comm/__init__.py",
        "group: The process group; ``None`` for the default (world) group.",
    ),
    ("timeout", "float | None"): (
        "accel/comm/__init__.py",
        "timeout: Seconds to wait for a silent peer; ``None`` for the group's own timeout.",
    ),
    # accel.ops.cpu_optim: what every step function takes.
    ("params", "Sequence[torch.Tensor]"): ("accel/ops/cpu_optim.py", ""),
    ("grads", "Sequence[torch.Tensor | None]"): ("accel/ops/cpu_optim.py", ""),
    ("steps", "Sequence[int]"): ("accel/ops/cpu_optim.py", ""),
    ("param_copies", "Sequence[torch.Tensor | None] | None"): ("accel/ops/cpu_optim.py", ""),
    # accel.testing.checks: the backend instance every check takes; accel.protocols'
    # supports_* helpers: the accelerator they test.
    ("acc", "Accelerator"): (
        ("accel/testing/checks/", "accel/protocols/accelerator.py"),
        "acc: The backend instance to check.",
    ),
    ("acc", "CoreAccelerator"): ("accel/protocols/accelerator.py", ""),
}


def _in_scope(scope: str | tuple[str, ...] | None, module: str) -> bool:
    """Whether a convention held in ``scope`` (a module, a folder ending in ``/``, several
    of them, or ``None`` for all) holds in ``module``."""
    if scope is None:
        return True
    return any(
        module == place or (place.endswith("/") and module.startswith(place))
        for place in ((scope,) if isinstance(scope, str) else scope)
    )


def _public_modules() -> list[pathlib.Path]:
    modules: list[pathlib.Path] = []
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


def _is_override(function: Function) -> bool:
    return any(ast.unparse(decorator).endswith("override") for decorator in function.decorator_list)


def _parameters(function: Function) -> list[str]:
    arguments = function.args
    names = [a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
    names += [a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return [name for name in names if name not in ("self", "cls")]


def _by_convention(function: Function, module: str) -> set[str]:
    """The parameters a convention documents in ``module`` (:data:`_CONVENTIONS`)."""
    arguments = function.args.posonlyargs + function.args.args + function.args.kwonlyargs
    names: set[str] = set()
    for a in arguments:
        key = (a.arg, ast.unparse(a.annotation) if a.annotation is not None else "")
        if key in _CONVENTIONS and _in_scope(_CONVENTIONS[key][0], module):
            names.add(a.arg)
    return names


Contract = tuple[str, str]  # ("<protocol that declares it>.<member>", its docstring)


def _protocols(paths: list[pathlib.Path]) -> dict[str, dict[str, Contract]]:
    """Each protocol class's members (its protocol bases' included) and their contracts."""
    own: dict[str, dict[str, Contract]] = {}
    bases: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            names = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
            if "Protocol" not in names:
                continue
            bases[node.name] = [name for name in names if name != "Protocol"]
            own[node.name] = {
                f.name: (f"{node.name}.{f.name}", ast.get_docstring(f) or "")
                for f in node.body
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            }

    def members(name: str) -> dict[str, Contract]:
        found: dict[str, Contract] = {}
        for base in reversed(bases.get(name, [])):
            found.update(members(base))
        found.update(own.get(name, {}))
        return found

    return {name: members(name) for name in own}


def _implemented(node: ast.ClassDef) -> list[str]:
    """The protocols a class names in ``@implements(...)``."""
    return [
        ast.unparse(argument).rsplit(".", 1)[-1]
        for decorator in node.decorator_list
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("implements")
        for argument in decorator.args
    ]


def _summary(docstring: str) -> str:
    return " ".join(docstring.split("\n\n", 1)[0].split())


def _contract_copies(function: Function, where: str, contract: Contract | None) -> list[str]:
    """Problems of an implementation whose contract ``(protocol.member, docstring)`` is."""
    if contract is None:
        return []
    source, text = contract
    docstring = ast.get_docstring(function) or ""
    problems: list[str] = []
    if sections := _CONTRACT_SECTION.findall(docstring):
        problems.append(
            f"{where}: repeats {', '.join(sections)} of {source}'s contract; say only what "
            "this implementation adds or changes"
        )
    if docstring and _summary(docstring) == _summary(text):
        problems.append(f"{where}: copies the summary of {source}")
    return problems


def _undocumented(
    path: pathlib.Path,
    root: pathlib.Path = ROOT,
    protocols: dict[str, dict[str, Contract]] | None = None,
    implementations: bool = False,
    foreign: dict[str, str] | None = None,
) -> list[str]:
    """Parameters left out or named wrongly, and contracts copied from ``protocols``.

    ``implementations``: the module is where implementations live, so a class defining a
    protocol member must name its protocol in ``@implements``.
    """
    protocols = protocols or {}
    foreign = FOREIGN_CONTRACTS if foreign is None else foreign
    every_member = {m: c[0] for members in protocols.values() for m, c in members.items()}
    problems: list[str] = []

    def visit(
        body: list[ast.stmt],
        owner: str,
        implemented: list[str],
        is_protocol: bool,
        elsewhere: str | None,
    ) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
                visit(
                    node.body,
                    f"{owner}{node.name}.",
                    _implemented(node),
                    "Protocol" in bases,
                    foreign.get(node.name, elsewhere),
                )
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                where = f"{path.relative_to(root)}:{node.lineno} {owner}{node.name}"
                docstring = ast.get_docstring(node) or ""
                for (name, _), (scope, text) in _CONVENTIONS.items():
                    if text and text in docstring and _in_scope(scope, module):
                        problems.append(f"{where}: restates the {name} convention")
                if elsewhere is not None and not node.name.startswith("_"):
                    problems.extend(_contract_copies(node, where, (f"{elsewhere}.{node.name}", "")))
                    continue
                contract = next(
                    (
                        protocols[protocol][node.name]
                        for protocol in implemented
                        if node.name in protocols.get(protocol, {})
                    ),
                    None,
                )
                if (
                    contract is None
                    and implementations
                    and owner
                    and not is_protocol
                    and node.name in every_member
                ):
                    source = every_member[node.name]
                    problems.append(
                        f"{where}: implements {source} without naming "
                        f"{source.split('.')[0]} in @implements"
                    )
                problems.extend(_contract_copies(node, where, contract))
                if node.name.startswith("_") or _is_override(node) or contract is not None:
                    continue
                documented = _documented_parameters(docstring)
                parameters = set(_parameters(node))
                if missing := parameters - documented - _by_convention(node, module):
                    problems.append(f"{where}: no Args entry for {', '.join(sorted(missing))}")
                if stale := documented - parameters:
                    problems.append(f"{where}: Args names no parameter {', '.join(sorted(stale))}")

    module = path.relative_to(root).as_posix()
    visit(ast.parse(path.read_text()).body, "", [], False, foreign.get(module))
    return problems


def test_every_public_function_documents_each_parameter_and_each_contract_once() -> None:
    modules = _public_modules()
    assert len(modules) > 50, modules  # the walk found the package
    protocols = _protocols(sorted(PROTOCOLS.glob("*.py")))
    assert {"DeviceAPI", "MemoryAPI", "OpBuilder"} <= protocols.keys()  # the walk found them
    assert "memory_allocated" in protocols["MemoryAPI"]  # through MemoryUsageAPI
    problems = [
        problem
        for path in modules
        for problem in _undocumented(
            path,
            protocols=protocols,
            implementations=any(folder in path.parents for folder in IMPLEMENTATIONS),
        )
    ]
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


def by_convention(device_index: int | None = None) -> None:
    """The convention documents ``device_index``."""


def restated(device_index: int | None = None) -> None:
    """Do a thing.

    Args:
        device_index: The device; ``None`` for the current one.
    """


def required(device_index: int) -> None:
    """A required index is the member's own to document."""
'''
    path = tmp_path / "example.py"
    path.write_text(source)
    problems = [p.split(": ", 1)[1] for p in _undocumented(path, root=tmp_path)]
    assert problems == [
        "no Args entry for count",
        "no Args entry for value",
        "Args names no parameter size",
        "restates the device_index convention",
        "no Args entry for device_index",
    ]


def test_the_check_finds_contracts_copied_into_implementations(tmp_path: pathlib.Path) -> None:
    protocol = tmp_path / "protocol.py"
    protocol.write_text('''
class SizeAPI(Protocol):
    def size(self, index: int | None = None) -> int:
        """The size of a device.

        Args:
            index: The device; ``None`` for the current one.

        Returns:
            Bytes.
        """
        ...


class CountAPI(SizeAPI, Protocol):
    def count(self) -> int:
        """How many there are."""
        ...
''')
    source = '''
@implements(CountAPI)
class Inherited:
    def size(self, index: int | None = None) -> int:
        return 0

    def count(self) -> int:
        """Always one (the host)."""
        return 1


@implements(SizeAPI)
class Verbatim:
    def size(self, index: int | None = None) -> int:
        """The size of a device.

        Args:
            index: The device; ``None`` for the current one.

        Returns:
            Bytes.
        """
        return 0


@implements(SizeAPI)
class Drifted:
    def size(self, index: int | None = None) -> int:
        """The device's size, from the driver.

        Returns:
            Bytes, or 0 without a driver.
        """
        return 0


class Unnamed:
    def size(self, index: int | None = None) -> int:
        """From the driver."""
        return 0
'''
    path = tmp_path / "example.py"
    path.write_text(source)
    protocols = _protocols([protocol])
    problems = [
        p.split(": ", 1)[1]
        for p in _undocumented(path, root=tmp_path, protocols=protocols, implementations=True)
    ]
    assert problems == [
        "repeats Args, Returns of SizeAPI.size's contract; say only what this implementation "
        "adds or changes",
        "copies the summary of SizeAPI.size",
        "repeats Returns of SizeAPI.size's contract; say only what this implementation adds "
        "or changes",
        "implements SizeAPI.size without naming SizeAPI in @implements",
        "no Args entry for index",
    ]


def test_the_check_finds_a_foreign_contract_copied_into_an_adapter(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "adapter.py"
    path.write_text('''
class Adapter(Base):
    def device_name(self, device_index: int | None = None) -> str:
        """Also takes a decimal ``str``."""

    def synchronize(self, device_index: int | None = None) -> None:
        """Wait.

        Args:
            device_index: The device.
        """
''')
    module = tmp_path / "stand_in.py"
    module.write_text('''
def read(buffer: bytes, offset: int = 0) -> int:
    """Also takes ``offset``."""


class Handle:
    def write(self, buffer: bytes) -> int:
        """Write.

        Returns:
            0.
        """
''')
    foreign = {"Adapter": "Base", "stand_in.py": "native"}
    problems = [
        p.split(": ", 1)[1]
        for source in (path, module)
        for p in _undocumented(source, root=tmp_path, foreign=foreign)
    ]
    assert problems == [
        "repeats Args of Base.synchronize's contract; say only what this implementation adds "
        "or changes",
        "repeats Returns of native.write's contract; say only what this implementation adds "
        "or changes",
    ]
