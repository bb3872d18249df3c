"""The rules of ``accel port``: a libcst transformer, torch.cuda code -> accelerator-agnostic code.

Formatting and comments are preserved (libcst edits the concrete syntax tree). Rules,
following DeepSpeed's porting guide:

- ``torch.cuda.<fn>(...)`` -> ``get_accelerator().<fn>(...)`` for every function accel has;
  ``set_device``, ``get_device_properties``, ``reset_accumulated_memory_stats`` and the
  ``torch.cuda.device(i)`` context manager -> accel's functions (``set_device(i)``, ...,
  ``device_index(i)``), which work with every backend;
- ``torch.cuda.current_device()`` -> ``current_device_name()`` where a device is expected
  (``device=``/``map_location=`` arguments, ``.to(...)``, ``torch.device(...)``), else
  ``current_device()``; a string of "cuda:" and it (an f-string or part of one, ``%``,
  ``str.format``, ``+ str(...)``) -> ``current_device_name()`` wherever it stands;
- ``torch.cuda.default_generators[i]`` -> ``get_accelerator().default_generator(i)``;
- ``'cuda'``, ``'cuda:N'``, ``'cuda:'`` and a provable ``int`` ``i`` (``f'cuda:{i}'``, ``%``,
  ``format``, ``+ str``) in those device positions only -> ``device_name()``,
  ``device_name(N)``, ``device_name(i)``; other strings are left alone, and ``'cuda:'``
  with any other index is reported;
- ``t.cuda(i, non_blocking)`` -> ``t.to(device=get_accelerator().device_name(i),
  non_blocking=...)``; ``t.pin_memory()`` -> ``get_accelerator().pin_memory(t)``;
  ``t.is_cuda`` is reported;
- an ``int`` that provably reaches a device position (``.to(0)``, ``.to(self.gpu_id)``,
  ``map_location=0``, ``device=local_rank`` with ``local_rank = int(...)``) ->
  ``get_accelerator().device_name(i)``;
- ``DistributedDataParallel(..., device_ids=[i], output_device=i)`` ->
  ``device_ids=ddp_device_ids(i)``, ``output_device=ddp_output_device(i)`` (``None`` on
  the CPU, where DDP refuses them);
- ``init_process_group('nccl', ...)``, ``backend='nccl'`` and a choice with ``'nccl'`` in a
  branch ->
  ``get_accelerator().communication_backend_name()``; its ``device_id=d`` ->
  ``process_group_device_id(d)`` (``None`` on the CPU, which torch refuses there);
- anything else under ``torch.cuda`` (graphs, streams and events, ``amp``, ...) is left as
  it is and reported with its position and what to do by hand.

accel's names are written as :meth:`ModuleFacts.local_name` gives them: an alias
(``_accel_get_accelerator``) where the module binds the name itself.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import libcst as cst
import libcst.matchers as m
from libcst.metadata import CodeRange, PositionProvider
from typing_extensions import override

from accel.port.facts import (
    BRACE_FORMATS,
    DDP_NAME,
    DEVICE_ARGUMENT,
    DEVICE_KEYWORDS,
    PERCENT_FORMATS,
    ModuleFacts,
    class_of,
)

_Node = TypeVar("_Node", bound=cst.CSTNode)
_EQUAL = cst.AssignEqual(
    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
)
# Text that ends in a device type "cuda:" (not "xcuda:"), which an index completes.
_CUDA_PREFIX = re.compile(r"(?<!\w)cuda:$")
# Strings that make "cuda:<index>" of one argument with % or str.format.
# A string that is a CUDA device ("cuda", "cuda:1") or a CUDA tensor type's name.
_CUDA_STRING = re.compile(r"cuda(:\d+)?|torch\.cuda\.\w*Tensor")
# NCCL, CUDA's collectives library, named where no rule proves a backend is expected.
_NCCL_STRING = re.compile(r"nccl", re.IGNORECASE)
# Text of a string (or an f-string's literal part) that names a CUDA device or type.
_CUDA_TEXT = re.compile(r"cuda(:|$)|torch\.cuda\.")

# torch.cuda functions with the same name and meaning on every accel backend.
DIRECT = frozenset({
    "is_available", "device_count", "synchronize", "current_device",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "reset_peak_memory_stats", "empty_cache", "manual_seed", "manual_seed_all",
    "initial_seed", "get_rng_state", "set_rng_state", "is_bf16_supported",
})  # fmt: skip
# Streams and events: an optional capability (StreamAPI), which the CPU and MPS backends
# lack, so code that uses them needs a person to decide what happens without them.
STREAM_NAMES = frozenset({"Stream", "Event", "stream", "current_stream", "default_stream"})
STREAM_ADVICE = (
    "streams and events are optional (StreamAPI; the CPU and MPS backends have none): use "
    "get_accelerator().{name} behind `if isinstance(acc, StreamAPI)`"
)
# torch.cuda functions that are accel functions (accel.functions): they work with every
# backend, including one written before the protocols had these members.
FUNCTIONS = {
    "set_device": "set_device", "get_device_properties": "get_device_properties",
    "reset_accumulated_memory_stats": "reset_accumulated_memory_stats",
    "device": "device_index",  # torch.cuda.device(i): the context manager
    "mem_get_info": "get_memory_info",  # (free, total) of a device on every backend
}  # fmt: skip
NVTX = frozenset({"range_push", "range_pop"})
# torch.cuda functions with no accel function of the same meaning, and where the answer is.
_NO_EQUIVALENT = {
    "get_device_capability": "is CUDA's (major, minor): accel.get_device_properties(i)"
    ".compute_capability holds it where the device has one, None elsewhere "
    "(accel.get_device_capability is torch.accelerator's, the dtypes a device holds)",
}
GRAPH_NAMES = frozenset(
    {"CUDAGraph", "graph", "graphs", "make_graphed_callables", "graph_pool_handle"}
)
GRAPH_ADVICE = (
    "no safe automatic rewrite; use get_accelerator().create_graph()/capture_to_graph()/"
    "replay_graph() behind `if isinstance(acc, GraphAPI)`"
)

# torch.cuda itself handed on as a value: what is called through it is not seen.
_CUDA_MODULE_ADVICE = (
    "{what} is used as a value (bound to a name, passed, patched, returned): accel port does "
    "not follow what is done through it; port it by hand (get_accelerator() has the device "
    "functions)"
)


@dataclass(frozen=True)
class Finding:
    """One place ``accel port`` changed, or would change, or needs a person."""

    line: int
    column: int
    message: str
    rewritten: bool
    rule: str = ""  # a key of RULES


# Why each rule is safe (printed by `accel port --explain`).
RULES = {
    "direct": "torch.cuda.<fn> has an accel method of the same name and meaning",
    "function": "torch.cuda.<fn> is an accel function of the same name and meaning "
    "(accel.set_device, get_device_properties, reset_accumulated_memory_stats; "
    "torch.cuda.device(i) is accel.device_index(i)), which works with every backend, "
    "including one written before the protocols had the member; 'cuda:N' is the index N",
    "nvtx": "NVTX ranges are ProfilerAPI ranges on every backend that has a profiler",
    "device-position": "a CUDA device literal where torch expects a device (device=, .to(), "
    "torch.device(), map_location=, set_device()) names the accelerator's device",
    "device-variable": "the variable is later used in a device position in the same scope "
    "(Python's scoping rules), so the literal assigned to it is a device",
    "device-type": "'cuda' if 'cuda' in d else 'cpu' is the device type of the device d; "
    "torch.device(d).type is that on every accelerator",
    "backend": "'nccl' where torch.distributed expects a backend names the accelerator's "
    "collectives library",
    "tensor-method": ".cuda(i, non_blocking)/.pin_memory() have device-generic equivalents "
    "(.to(device=..., non_blocking=...) by keyword, which a storage's to() needs too)",
    "int-device": "torch reads an int in a device position (.to(0), map_location=0, "
    "device=i) as cuda:<int>; the int is provably one (a literal, or a variable or self "
    "attribute only ever assigned ints), so it names the accelerator's device <int>",
    "ddp": "DistributedDataParallel takes device_ids=[i]/output_device=i only for modules "
    "on an accelerator and refuses them on the CPU; accel.ddp_device_ids(i) and "
    "ddp_output_device(i) give each its value",
    "device-id": "init_process_group(device_id=d) takes an accelerator device with an index "
    "and refuses the CPU's; accel.process_group_device_id(d) is d on accelerators and None "
    "on the CPU",
    "default-generators": "torch.cuda.default_generators[i] is the accelerator's generator i",
    "device-string": "'cuda:' followed by torch.cuda.current_device() (an f-string, % or "
    "str.format, or + str()) is the name of the current device; "
    "get_accelerator().current_device_name() is that on every accelerator",
    "amp": "torch.cuda.amp.X is torch.amp.X / torch.autocast for the device 'cuda'; the "
    "device-generic forms take the accelerator's device type",
    "manual": "no rewrite is provably safe: a person decides (the suggestion says how)",
}


def _literal(node: cst.BaseExpression) -> object:
    return node.evaluated_value if isinstance(node, cst.SimpleString) else None


def _calls(node: cst.BaseExpression, function: str) -> bool:
    """Whether ``node`` is a call of ``function`` (by its name or as an attribute)."""
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    name = func.value if isinstance(func, cst.Name) else None
    if isinstance(func, cst.Attribute):
        name = func.attr.value
    return name == function


_ONE_ARG = [m.Arg(keyword=None, star="")]


def _cuda_index(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``x`` of the strings :func:`accel.port.facts.cuda_index` knows (the same forms, on
    the concrete tree: ``f"cuda:{x}"``, ``"cuda:%d" % x``, ``"cuda:{}".format(x)``,
    ``"cuda:" + str(x)``); else None."""
    if m.matches(
        node,
        m.FormattedString(parts=[
            m.FormattedStringText(value="cuda:"),
            m.FormattedStringExpression(format_spec=None, conversion=None),
        ]),
    ):  # fmt: skip
        assert isinstance(node, cst.FormattedString)
        part = node.parts[1]
        assert isinstance(part, cst.FormattedStringExpression)
        return part.expression
    if isinstance(node, cst.BinaryOperation):
        text, operand = _literal(node.left), node.right
        if isinstance(node.operator, cst.Modulo) and text in PERCENT_FORMATS:
            return None if isinstance(operand, cst.Tuple) else operand
        if text == "cuda:" and m.matches(operand, m.Call(func=m.Name("str"), args=_ONE_ARG)):
            assert isinstance(operand, cst.Call)
            return operand.args[0].value
    if m.matches(node, m.Call(func=m.Attribute(attr=m.Name("format")), args=_ONE_ARG)):
        assert isinstance(node, cst.Call)
        assert isinstance(node.func, cst.Attribute)
        return node.args[0].value if _literal(node.func.value) in BRACE_FORMATS else None
    return None


def _names_not_read(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The children of ``node`` that are names it binds or labels (an attribute's name, a
    keyword, a parameter, an assignment's target), not values it reads."""
    if isinstance(node, cst.Attribute):
        return [node.attr]
    if isinstance(node, cst.Arg) and node.keyword is not None:
        return [node.keyword]
    if isinstance(node, cst.Param | cst.FunctionDef | cst.ClassDef):
        return [node.name]
    if isinstance(node, cst.AsName | cst.NameItem):
        return [node.name]
    if isinstance(node, cst.AssignTarget | cst.AnnAssign | cst.AugAssign | cst.For | cst.CompFor):
        return [node.target]
    if isinstance(node, cst.Del):
        return [node.target]
    return []


class PortTransformer(cst.CSTTransformer):
    """Applies the rules; ``findings`` lists every change and every manual site."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, facts: ModuleFacts | None = None) -> None:
        super().__init__()
        self.findings: list[Finding] = []
        self.facts = facts or ModuleFacts()
        self.scope: list[str] = []
        self._called: set[int] = set()  # ids of the func nodes of calls
        self._owners: set[int] = set()  # ids of the nodes whose attribute is read
        self._not_read: set[int] = set()  # ids of Names that bind or label, not read
        # 'cuda', 'cuda:N' and 'torch.cuda.*Tensor' strings seen: reported at the end where
        # no rule took their line (a default, an attribute, a container: places the rules
        # cannot prove hold a device).
        self._cuda_strings: list[cst.SimpleString] = []
        self._consumed: set[int] = set()  # ids of original nodes a rule took away
        self._compared: set[int] = set()  # ids of the operands of == and != comparisons
        # Choices whose test held torch.cuda.is_available(), by the id of the node left in
        # the tree: that node (held, so that its id is not reused by a later node when a
        # rule around the choice replaces it) and the original node.
        self._guarded_choices: dict[int, tuple[cst.IfExp, cst.IfExp]] = {}
        self.imports: set[str] = set()
        """Names from ``accel`` beyond ``get_accelerator`` that the rewrites use (each
        called by :meth:`ModuleFacts.local_name`)."""

    # -- what the rewrites write: accel's names as this module can call them
    def _accel_name(self, name: str) -> cst.Name:
        """accel's ``name`` as this module calls it (an alias where it binds ``name``)."""
        return cst.Name(self.facts.local_name(name))

    def _accelerator_call(self, method: str, args: Sequence[cst.Arg] = ()) -> cst.Call:
        accelerator = cst.Call(func=self._accel_name("get_accelerator"))
        return cst.Call(
            func=cst.Attribute(value=accelerator, attr=cst.Name(method)), args=list(args)
        )

    def _device_string(self, node: cst.BaseExpression) -> cst.Call | None:
        """``get_accelerator().device_name(...)`` for 'cuda', 'cuda:N', f'cuda:{i}'; else
        None."""
        if isinstance(node, cst.SimpleString):
            value = node.evaluated_value
            if value == "cuda":
                return self._accelerator_call("device_name")
            if isinstance(value, str) and value.startswith("cuda:") and value[5:].isdigit():
                return self._accelerator_call("device_name", [cst.Arg(cst.Integer(value[5:]))])
        index = _cuda_index(node)
        if index is not None and self._is_int(index):
            # Only an int: device_name() refuses the str of os.environ["LOCAL_RANK"].
            return self._accelerator_call("device_name", [cst.Arg(index)])
        return None

    def _device_index(self, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """``N`` for 'cuda:N', ``i`` for f'cuda:{i}'; else None (set_device takes the
        index)."""
        name = self._device_string(node)
        if name is None or not name.args:
            return None
        return name.args[0].value

    def _current_device_as_name(self, node: cst.BaseExpression) -> cst.Call | None:
        accelerator = m.Call(func=m.Name(self.facts.local_name("get_accelerator")))
        if m.matches(
            node,
            m.Call(func=m.Attribute(value=accelerator, attr=m.Name("current_device")), args=[]),
        ):
            return self._accelerator_call("current_device_name")
        return None

    def _as_device(self, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """The agnostic form of an expression standing where a device is expected, if any.

        A conditional expression is rewritten branch by branch (``"cuda:0" if ok else
        "cpu"`` -> ``get_accelerator().device_name(0) if ok else "cpu"``).
        """
        if isinstance(node, cst.IfExp):
            body, orelse = self._as_device(node.body), self._as_device(node.orelse)
            if body is None and orelse is None:
                return None
            return node.with_changes(body=body or node.body, orelse=orelse or node.orelse)
        return self._device_string(node) or self._current_device_as_name(node)

    def _as_backend(self, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """``get_accelerator().communication_backend_name()`` for the literal ``'nccl'``, and
        for a choice with ``'nccl'`` in a branch (``"nccl" if torch.cuda.is_available() else
        "gloo"``: the test, ported, is true on every accelerator, the CPU's included, where
        nccl does not exist; the accelerator's own backend is what the choice meant)."""
        if (
            isinstance(node, cst.IfExp)
            and {_literal(node.body), _literal(node.orelse)} >= {"nccl"}
            and all(isinstance(_literal(b), str) for b in (node.body, node.orelse))
            and self._tests_availability(node.test)
        ):
            return self._accelerator_call("communication_backend_name")
        if isinstance(node, cst.SimpleString) and node.evaluated_value == "nccl":
            return self._accelerator_call("communication_backend_name")
        return None

    def _is_torch(self, node: cst.BaseExpression) -> bool:
        """``torch`` however this module imports it (``th``)."""
        return isinstance(node, cst.Name) and self.facts.is_torch_name(
            tuple(self.scope), node.value
        )

    def _torch_name(self) -> str | None:
        """A name this scope calls ``torch`` by (for code the rewrites write)."""
        scope = tuple(self.scope)
        names = sorted(
            name for name in self.facts.torch_names if self.facts.is_torch_name(scope, name)
        )
        return names[0] if names else None

    def _tests_availability(self, test: cst.BaseExpression) -> bool:
        """``[not] torch.cuda.is_available()``, ported already or not."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test = test.expression
        return m.matches(test, m.Call(func=m.Attribute(attr=m.Name("is_available")), args=[]))

    # -- names and scopes
    def _is_torch_cuda(self, node: cst.BaseExpression) -> bool:
        """``torch.cuda`` however this module spells it (``th.cuda``, ``cuda``, ``tc``)."""
        if isinstance(node, cst.Name):
            return self.facts.is_torch_name(tuple(self.scope), node.value, cuda=True)
        return (
            isinstance(node, cst.Attribute)
            and node.attr.value == "cuda"
            and self._is_torch(node.value)
        )

    @override
    def on_visit(self, node: cst.CSTNode) -> bool:
        # Functions and classes open a scope (names as ModuleFacts records them).
        if isinstance(node, cst.FunctionDef | cst.ClassDef):
            self.scope.append(node.name.value)
        if isinstance(node, cst.Call):
            self._called.add(id(node.func))  # torch.cuda.<name> here is called, not passed
            if m.matches(node.func, m.Name("getattr") | m.Name("hasattr")) and node.args:
                self._owners.add(id(node.args[0].value))  # a lookup on it, reported as one
        if isinstance(node, cst.Attribute):
            self._owners.add(id(node.value))  # torch.cuda.nvtx.<name>: nvtx is an owner
        self._not_read.update(id(name) for name in _names_not_read(node))
        return super().on_visit(node)

    @override
    def on_leave(
        self, original_node: _Node, updated_node: _Node
    ) -> _Node | cst.RemovalSentinel | cst.FlattenSentinel[_Node]:
        result = super().on_leave(original_node, updated_node)
        if isinstance(original_node, cst.FunctionDef | cst.ClassDef):
            self.scope.pop()
        return result

    # -- literals that flow into device and backend positions
    def _rewrite_assigned(
        self, target: cst.BaseExpression, original: cst.BaseExpression, value: cst.BaseExpression
    ) -> cst.BaseExpression | None:
        if not isinstance(target, cst.Name):
            return None
        where = (tuple(self.scope), target.value)
        code = cst.Module([]).code_for_node
        for variables, rewrite, why, rule in (
            (
                self.facts.device_variables,
                self._as_device,
                "is used as a device",
                "device-variable",
            ),
            (
                self.facts.backend_variables,
                self._as_backend,
                "names the collectives backend",
                "backend",
            ),
        ):
            replacement = rewrite(value) if where in variables else None
            if replacement is not None:
                self._drop_choice_findings(original)
                self._note(original, f"{target.value} = {code(value)} -> {code(replacement)} "
                                     f"({target.value} {why})", rule=rule)  # fmt: skip
                return replacement
        if where in self.facts.device_variables:
            self._note_cuda_device(original, value)
        return None

    def _drop_choice_findings(self, original: cst.BaseExpression) -> None:
        """A choice replaced whole (``"nccl" if torch.cuda.is_available() else "gloo"``):
        its test's own rewrite is gone with it."""
        if isinstance(original, cst.IfExp):
            self._drop_findings_at(original.test)

    @override
    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        if len(updated_node.targets) != 1:
            return updated_node
        replacement = self._rewrite_assigned(
            updated_node.targets[0].target, original_node.value, updated_node.value
        )
        return updated_node if replacement is None else updated_node.with_changes(value=replacement)

    @override
    def leave_AnnAssign(
        self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign
    ) -> cst.AnnAssign:
        if updated_node.value is None or original_node.value is None:
            return updated_node
        replacement = self._rewrite_assigned(
            updated_node.target, original_node.value, updated_node.value
        )
        return updated_node if replacement is None else updated_node.with_changes(value=replacement)

    @override
    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = node.evaluated_value
        if isinstance(value, str) and (
            _CUDA_STRING.fullmatch(value) or _NCCL_STRING.fullmatch(value)
        ):
            self._cuda_strings.append(node)

    @override
    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        updated_node = self._choices_keep_their_guards(updated_node)
        taken = {finding.line for finding in self.findings}
        for node in self._cuda_strings:
            line, _ = self._position(node)
            if line in taken or id(node) in self._consumed:
                continue  # rewritten, or reported, with what is around it
            taken.add(line)
            value = str(node.evaluated_value)
            if id(node) in self._compared and _NCCL_STRING.fullmatch(value):
                self._manual(node, f"a comparison with {value!r} is false on every backend but "
                             "NCCL: compare with get_accelerator().communication_backend_name() "
                             "where the code it guards runs on any backend")  # fmt: skip
                continue
            advice = (
                "is a CUDA tensor type: use the CPU type (torch.FloatTensor, ...) with "
                "device=get_accelerator().device_name()" if value.startswith("torch.") else
                "names NCCL, CUDA's collectives library, where accel port cannot prove a "
                "backend is meant (an option's default, a comparison, a container); use "
                "get_accelerator().communication_backend_name()" if _NCCL_STRING.fullmatch(value)
                else
                "is left as it is: accel port cannot prove it names a device here (a default, "
                "an attribute, a container); if it does, use get_accelerator().device_name()"
            )  # fmt: skip
            self._manual(node, f"{value!r} {advice}")
        return updated_node

    def _choices_keep_their_guards(self, module: cst.Module) -> cst.Module:
        """Put back the guard of each choice left as the rules found it whose branches still
        hold CUDA code (see :meth:`_guards_put_back`); a choice a rule around it rewrote is
        a new node, not found here."""
        rules = self

        class PutBack(cst.CSTTransformer):
            @override
            def leave_IfExp(
                self, original_node: cst.IfExp, updated_node: cst.IfExp
            ) -> cst.BaseExpression:
                left, found = rules._guarded_choices.get(id(original_node), (None, None))
                if (
                    left is not original_node
                    or found is None
                    or not (
                        rules._names_cuda(updated_node.body)
                        or rules._names_cuda(updated_node.orelse)
                    )
                ):
                    return updated_node
                return updated_node.with_changes(
                    test=rules._guards_put_back(found.test, updated_node.test)
                )

        if not self._guarded_choices:
            return module
        return module.visit(PutBack())

    @override
    def leave_Comparison(
        self, original_node: cst.Comparison, updated_node: cst.Comparison
    ) -> cst.BaseExpression:
        # x.device.type == "cuda": false on every other accelerator, so the code it guards
        # takes the CPU's path there (or the reverse with !=). A person decides.
        operands = [original_node.left, *(c.comparator for c in original_node.comparisons)]
        equality = all(
            isinstance(c.operator, cst.Equal | cst.NotEqual) for c in original_node.comparisons
        )
        if equality:
            self._compared.update(id(operand) for operand in operands)
        if equality and "cuda" in [_literal(operand) for operand in operands]:
            self._manual(original_node, "a comparison with 'cuda' is false on every other "
                         "accelerator; compare with get_accelerator().device_name() where the "
                         "code it guards runs on any accelerator")  # fmt: skip
        return updated_node

    @override
    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.BaseStatement:
        # `if torch.cuda.is_available(): model.cuda(args.gpu)`: ported, the guard is true on
        # every accelerator (the CPU backend's included), and the branch, still CUDA's own,
        # would run where it did not. The guard stays until the branch is ported.
        if updated_node.test is original_node.test:
            return updated_node
        branches = [updated_node.body, *([updated_node.orelse] if updated_node.orelse else [])]
        if not any(self._names_cuda(branch) for branch in branches):
            return updated_node
        return updated_node.with_changes(
            test=self._guards_put_back(original_node.test, updated_node.test)
        )

    def _availability_guards(self, test: cst.BaseExpression) -> list[cst.Call]:
        """The ``torch.cuda.is_available()`` calls in ``test`` (an original node)."""
        return [
            call for call in m.findall(test, m.Call(func=m.Attribute(attr=m.Name("is_available"))))
            if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
            and self._is_torch_cuda(call.func.value)
        ]  # fmt: skip

    def _guards_put_back(
        self, original: cst.BaseExpression, updated: cst.BaseExpression
    ) -> cst.BaseExpression:
        """``updated`` (the test of a choice whose branches still hold CUDA code) with its
        ported ``torch.cuda.is_available()`` guards as they were, each reported: ported,
        a guard is true on every accelerator (the CPU backend's included), and the CUDA
        branch would run where it did not. Whatever else the test held stays ported."""
        guards = self._availability_guards(original)
        if not guards:
            return updated
        for guard in guards:
            where = self._position(guard)
            self.findings = [
                f for f in self.findings if (f.line, f.column) != where or f.rule != "direct"
            ]
            self._manual(guard, "torch.cuda.is_available() guards code still written for CUDA: "
                         "ported, the guard would be true on every accelerator (the CPU "
                         "backend's included); port the branch, then the guard")  # fmt: skip
        ported_guard = m.Call(
            func=m.Attribute(
                value=m.Call(func=m.Name(self.facts.local_name("get_accelerator")), args=[]),
                attr=m.Name("is_available"),
            ),
            args=[],
        )
        test = m.replace(updated, ported_guard, guards[0])
        assert isinstance(test, cst.BaseExpression)
        return test

    def _names_cuda(self, node: cst.CSTNode) -> bool:
        """Whether ``node``, as the rules left it, still holds CUDA code: a string naming a
        CUDA device or type (``'cuda'``, ``f'cuda:{r!s}'``, not ``'training on cuda'``),
        ``torch.cuda``, the name ``cuda``, or a ``.cuda(...)`` call (``use_cuda`` and
        ``args.cuda`` are not)."""
        attribute_names: set[int] = set()
        calls = {id(call.func) for call in m.findall(node, m.Call()) if isinstance(call, cst.Call)}
        for found in m.findall(node, m.Attribute(attr=m.Name("cuda"))):
            assert isinstance(found, cst.Attribute)
            attribute_names.add(id(found.attr))
            if id(found) in calls or self._is_torch_cuda(found):
                return True
        for found in m.findall(node, m.SimpleString() | m.FormattedStringText() | m.Name("cuda")):
            if isinstance(found, cst.Name):
                if id(found) not in attribute_names:
                    return True
                continue
            if isinstance(found, cst.SimpleString):
                text: object = found.evaluated_value
            elif isinstance(found, cst.FormattedStringText):
                text = found.value
            else:
                continue
            if isinstance(text, str) and _CUDA_TEXT.match(text):
                return True
        return False

    @override
    def leave_IfExp(self, original_node: cst.IfExp, updated_node: cst.IfExp) -> cst.BaseExpression:
        # `'cuda' if 'cuda' in device else 'cpu'`, the device type of a known device: on any
        # other accelerator it would say "cpu". torch.device(device).type is right on all.
        test = updated_node.test
        if (
            _literal(updated_node.body) == "cuda"
            and _literal(updated_node.orelse) == "cpu"
            and isinstance(test, cst.Comparison)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.In)
            and _literal(test.left) == "cuda"
            and isinstance(test.comparisons[0].comparator, cst.Name)
        ):
            device = test.comparisons[0].comparator
            assert isinstance(device, cst.Name)
            torch_name = self._torch_name()
            known = {(tuple(self.scope), device.value), ((), device.value)}
            if known & self.facts.device_variables and torch_name is not None:
                replacement = cst.Attribute(
                    value=cst.Call(
                        func=cst.Attribute(cst.Name(torch_name), cst.Name("device")),
                        args=[cst.Arg(device)],
                    ),
                    attr=cst.Name("type"),
                )
                code = cst.Module([]).code_for_node(replacement)
                self._note(original_node, f"'cuda' if 'cuda' in {device.value} else 'cpu' -> {code}",
                           rule="device-type")  # fmt: skip
                return replacement
        if test is not original_node.test and self._availability_guards(original_node.test):
            # `"cuda" if torch.cuda.is_available() else "cpu"`: decided at the end, as a
            # rule around the choice (a device variable's) may port its branches yet.
            self._guarded_choices[id(updated_node)] = (updated_node, original_node)
        return updated_node

    def _position(self, node: cst.CSTNode) -> tuple[int, int]:
        position = self.get_metadata(PositionProvider, node)
        assert isinstance(position, CodeRange)  # every node of the parsed module has one
        return position.start.line, position.start.column + 1

    def _note(self, node: cst.CSTNode, message: str, rewritten: bool = True, *, rule: str) -> None:
        line, column = self._position(node)
        self.findings.append(Finding(line, column, message, rewritten, rule))

    def _manual(self, node: cst.CSTNode, message: str) -> None:
        """Report ``node`` for a person: no rewrite of it is provably safe."""
        self._note(node, message, rewritten=False, rule="manual")

    # "cuda:" completed by torch.cuda.current_device(): the current device's name
    def _is_cuda_current_device(self, node: cst.BaseExpression) -> bool:
        """``torch.cuda.current_device()``, however the module spells ``torch.cuda``."""
        return (
            isinstance(node, cst.Call)
            and not node.args
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "current_device"
            and self._is_torch_cuda(node.func.value)
        )

    def _drop_findings_at(self, node: cst.CSTNode) -> None:
        where = self._position(node)
        self.findings = [f for f in self.findings if (f.line, f.column) != where]

    def _current_device_name(
        self, original: cst.CSTNode, inners: Sequence[cst.CSTNode], result: cst.BaseExpression
    ) -> cst.BaseExpression:
        """``result`` for ``original``, a string made of "cuda:" and the ``inners``
        (torch.cuda.current_device()): one finding for the site, in place of the ones for
        the ``inners`` alone."""
        for inner in inners:
            self._drop_findings_at(inner)
        code = cst.Module([]).code_for_node
        self._note(original, f"{code(original)} -> {code(result)} (the current device's "
                             "name)", rule="device-string")  # fmt: skip
        return result

    @override
    def leave_FormattedString(
        self, original_node: cst.FormattedString, updated_node: cst.FormattedString
    ) -> cst.BaseExpression:
        # f"...cuda:{torch.cuda.current_device()}...": rewriting the call alone would leave
        # a CUDA device's name on every accelerator.
        parts = list(updated_node.parts)
        inners: list[cst.BaseExpression] = []
        for index, part in enumerate(original_node.parts):
            before = parts[index - 1] if index else None
            if not (
                isinstance(part, cst.FormattedStringExpression)
                and self._is_cuda_current_device(part.expression)
                and isinstance(before, cst.FormattedStringText)
                and _CUDA_PREFIX.search(before.value)
            ):
                continue
            if part.format_spec is not None or part.conversion is not None:
                self._drop_findings_at(part.expression)
                parts[index] = part  # as it was: a person decides
                self._manual(part, "this string names a CUDA device by its index; use "
                             "get_accelerator().current_device_name()")  # fmt: skip
                continue
            inners.append(part.expression)
            parts[index - 1] = before.with_changes(value=before.value[: -len("cuda:")])
            parts[index] = cst.FormattedStringExpression(
                self._accelerator_call("current_device_name")
            )
        if not inners:
            return updated_node.with_changes(parts=parts)
        parts = [p for p in parts if not (isinstance(p, cst.FormattedStringText) and not p.value)]
        only = parts[0] if len(parts) == 1 else None
        result = (  # f"{name}" is the name itself
            only.expression
            if isinstance(only, cst.FormattedStringExpression)
            else updated_node.with_changes(parts=parts)
        )
        return self._current_device_name(original_node, inners, result)

    @override
    def leave_BinaryOperation(
        self, original_node: cst.BinaryOperation, updated_node: cst.BinaryOperation
    ) -> cst.BaseExpression:
        left, right = original_node.left, original_node.right
        if isinstance(original_node.operator, cst.Modulo) and _literal(left) in PERCENT_FORMATS:
            inner = right  # "cuda:%d" % torch.cuda.current_device()
        elif (
            isinstance(original_node.operator, cst.Add)
            and _literal(left) == "cuda:"
            and m.matches(right, m.Call(func=m.Name("str"), args=[m.Arg(keyword=None, star="")]))
        ):
            assert isinstance(right, cst.Call)
            inner = right.args[0].value  # "cuda:" + str(torch.cuda.current_device())
        else:
            return updated_node
        if self._is_cuda_current_device(inner):
            name = self._accelerator_call("current_device_name")
            return self._current_device_name(original_node, [inner], name)
        return updated_node

    def _rewrite_format_call(self, original: cst.Call) -> cst.BaseExpression | None:
        """``"cuda:{}".format(torch.cuda.current_device())`` -> the current device's name."""
        func, args = original.func, original.args
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "format"
            and _literal(func.value) in BRACE_FORMATS
            and len(args) == 1
            and args[0].keyword is None
            and not args[0].star
            and self._is_cuda_current_device(args[0].value)
        ):
            name = self._accelerator_call("current_device_name")
            return self._current_device_name(original, [args[0].value], name)
        return None

    def _note_cuda_device(self, node: cst.CSTNode, now: cst.CSTNode | None = None) -> None:
        """Report a device position (or device variable) left as it is although its code
        names CUDA: ``"cuda:" + os.environ["LOCAL_RANK"]``, ``f"cuda:{r!s}"``,
        ``torch.device("cuda", r)``... A person makes it ``get_accelerator().device_name(i)``
        with ``i`` an int. ``now`` is the node as the inner rules left it, where they
        rewrote part of it (``f"cuda:{torch.cuda.current_device()}"``)."""
        if self._names_cuda(now or node):
            self._manual(node, "this names a CUDA device in a way accel port cannot prove "
                         "is one index; use get_accelerator().device_name(i) with i an int")  # fmt: skip

    # torch.cuda.<fn>(...) and torch.cuda.nvtx.<fn>(...)
    def _rewrite_torch_cuda_call(
        self, original: cst.Call, updated: cst.Call
    ) -> cst.BaseExpression | None:
        func = updated.func
        if not isinstance(func, cst.Attribute):
            return None
        name = func.attr.value
        if self._is_torch_cuda(func.value) and name in FUNCTIONS:
            return self._rewrite_function(original, updated, name, FUNCTIONS[name])
        if self._is_torch_cuda(func.value) and name in STREAM_NAMES:
            self._manual(original, f"torch.cuda.{name}(): " + STREAM_ADVICE.format(name=name))
            return None
        if self._is_torch_cuda(func.value) and name in DIRECT:
            args = self._direct_arguments(original, updated, name)
            if args is None:
                return None
            self._note(
                original, f"torch.cuda.{name}() -> get_accelerator().{name}()", rule="direct"
            )
            return updated.with_changes(func=self._accelerator_call(name).func, args=args)
        owner = func.value
        if isinstance(owner, cst.Attribute) and self._is_torch_cuda(owner.value):
            if owner.attr.value == "nvtx" and name in NVTX:
                self._note(
                    original, f"torch.cuda.nvtx.{name}() -> get_accelerator().{name}() (ProfilerAPI)",
                    rule="nvtx",
                )  # fmt: skip
                return updated.with_changes(func=self._accelerator_call(name).func)
            if owner.attr.value == "amp" and name in ("GradScaler", "autocast"):
                return self._rewrite_amp(original, updated, name)
        return None

    def _direct_arguments(
        self, original: cst.Call, updated: cst.Call, name: str
    ) -> list[cst.Arg] | None:
        """``torch.cuda.<name>(...)``'s arguments as accel's method of the same name takes
        them, or None (reported for a person) where they cannot be: torch takes a device
        of any kind (``DEVICE_ARGUMENT``) where accel takes an index, and accel's
        ``is_bf16_supported`` takes no ``including_emulation``."""
        args = list(updated.args)
        position = DEVICE_ARGUMENT.get(name)
        if args and name == "is_bf16_supported":
            self._manual(
                original, "torch.cuda.is_bf16_supported(including_emulation=...): "
                "get_accelerator().is_bf16_supported() takes no arguments: rewrite it by hand",
            )  # fmt: skip
            return None
        if position is None:
            return args
        if any(arg.star for arg in args):
            self._manual(
                original, f"torch.cuda.{name}(*...): accel port cannot see the arguments, and "
                f"get_accelerator().{name}() takes a device index where torch takes any device",
            )  # fmt: skip
            return None
        found = next(
            (i for i, arg in enumerate(args) if arg.keyword is not None and arg.keyword.value == "device"),
            position if len(args) > position and args[position].keyword is None else None,
        )  # fmt: skip
        if found is None:
            return args
        value = args[found].value
        self._consumed.add(id(original.args[found].value))  # no stray 'cuda' left to report
        if isinstance(value, cst.SimpleString) and value.evaluated_value == "cuda":
            # The current device: accel's default. The argument before it, now last, loses
            # its comma.
            kept = args[:found] + args[found + 1 :]
            if found == len(args) - 1 and kept:
                kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return kept
        index = self._device_index(value)
        if index is None and (self._is_int(value) or m.matches(value, m.Name("None"))):
            index = value
        if index is None:
            self._manual(
                original, f"torch.cuda.{name}(...): its device may be a torch.device or a "
                f"string, where get_accelerator().{name}() takes a device index (an int, or "
                "None for the current device): pass torch.device(d).index",
            )  # fmt: skip
            return None
        keyword = cst.Name("device_index") if args[found].keyword is not None else None
        args[found] = args[found].with_changes(
            value=index, keyword=keyword, equal=_EQUAL if keyword else cst.MaybeSentinel.DEFAULT
        )
        return args

    def _rewrite_function(
        self, original: cst.Call, updated: cst.Call, name: str, function: str
    ) -> cst.Call:
        """``torch.cuda.<name>(...)`` -> ``<function>(...)`` from accel (under an alias
        where the module binds ``<function>`` itself)."""
        args = list(updated.args)
        if name in ("set_device", "device") and args and args[0].keyword is None:
            index = self._device_index(args[0].value)
            if index is not None:
                args[0] = args[0].with_changes(value=index)
            else:
                self._note_cuda_device(original.args[0].value, args[0].value)
        self.imports.add(function)
        local = self._accel_name(function)
        self._note(original, f"torch.cuda.{name}() -> accel's {function}()", rule="function")
        return updated.with_changes(func=local, args=args)  # its parentheses' comments kept

    def _rewrite_amp(
        self, original: cst.Call, updated: cst.Call, name: str
    ) -> cst.BaseExpression | None:
        torch_name = self._torch_name()
        device = cst.Arg(self._accelerator_call("device_name"))
        positional = any(arg.keyword is None and arg.star == "" for arg in updated.args)
        if torch_name is None or (name == "autocast" and positional):
            # torch.cuda.amp.autocast(enabled, dtype, ...) and torch.autocast(device_type,
            # dtype, enabled, ...) order their parameters differently: keywords only.
            suggestion = "torch.amp.GradScaler(device, ...)" if name == "GradScaler" else (
                "torch.autocast(get_accelerator().device_name(), dtype=..., enabled=...)"
            )  # fmt: skip
            self._drop_manual_at(original)
            self._manual(
                original, f"torch.cuda.amp.{name}(...): use {suggestion} with keyword arguments"
            )
            return None
        target = (
            cst.Attribute(cst.Attribute(cst.Name(torch_name), cst.Name("amp")), cst.Name("GradScaler"))
            if name == "GradScaler" else cst.Attribute(cst.Name(torch_name), cst.Name("autocast"))
        )  # fmt: skip
        rewritten = updated.with_changes(func=target, args=[device, *updated.args])
        self._drop_manual_at(original)
        code = cst.Module([]).code_for_node
        self._note(original, f"torch.cuda.amp.{name}(...) -> {code(target)}("
                             "get_accelerator().device_name(), ...)", rule="amp")  # fmt: skip
        return rewritten

    def _drop_manual_at(self, node: cst.CSTNode) -> None:
        # The inner `torch.cuda.amp` attribute was reported as having no equivalent before
        # the call around it was seen; the call's own finding replaces it.
        where = self._position(node)
        self.findings = [f for f in self.findings if f.rewritten or (f.line, f.column) != where]

    def _rewrite_tensor_method(
        self, original: cst.Call, updated: cst.Call
    ) -> cst.BaseExpression | None:
        func = updated.func
        if not isinstance(func, cst.Attribute) or self._is_torch_cuda(func):
            return None
        owner = func.value
        if func.attr.value in self.facts.own_methods:
            self._note_own_method(original, func.attr.value)
            return None
        if func.attr.value == "cuda" and not (self._is_torch(owner)):
            return self._rewrite_cuda_method(original, updated, func)
        if func.attr.value == "pin_memory" and not updated.args:
            self._note(
                original, ".pin_memory() -> get_accelerator().pin_memory(t)", rule="tensor-method"
            )
            return self._accelerator_call("pin_memory", [cst.Arg(owner)])
        return None

    def _rewrite_cuda_method(
        self, original: cst.Call, updated: cst.Call, func: cst.Attribute
    ) -> cst.BaseExpression | None:
        """``x.cuda(device, non_blocking, ...)`` -> ``x.to(device=<the accelerator's device>,
        non_blocking=..., ...)``: keywords, which a tensor's, a module's and a storage's
        ``to`` all take (a storage's takes nothing else), each argument keeping its
        comments. The device must be provably one index (or ``None``, the current one):
        ``device_name()`` takes an int."""
        positional = [a for a in updated.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a for a in updated.args if a.keyword is not None}
        device_arg = positional[0] if positional else keywords.get("device")
        device = self._cuda_device(device_arg.value if device_arg is not None else None)
        if device is None or len(positional) + len(keywords) != len(updated.args) or (
            len(positional) > 2
            or set(keywords) - {"device", "non_blocking", "memory_format"}
            or (positional and "device" in keywords)
            or (len(positional) == 2 and "non_blocking" in keywords)
        ):  # fmt: skip
            self._manual(original, ".cuda(...) with a device accel port cannot prove is one "
                         "index, or arguments it does not map; use .to(device="
                         "get_accelerator().device_name(i), non_blocking=...) with i an int")  # fmt: skip
            return None
        args: list[cst.Arg] = []
        for arg in updated.args:
            if arg is device_arg:
                arg = arg.with_changes(keyword=cst.Name("device"), equal=_EQUAL, value=device)
            elif len(positional) == 2 and arg is positional[1]:
                arg = arg.with_changes(keyword=cst.Name("non_blocking"), equal=_EQUAL)
            args.append(arg)
        if device_arg is None:
            comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if args else None
            first = cst.Arg(device, keyword=cst.Name("device"), equal=_EQUAL)
            args.insert(0, first.with_changes(comma=comma) if comma else first)
        code = cst.Module([]).code_for_node
        self._note(original, f".cuda(...) -> .to(device={code(device)}, ...)", rule="tensor-method")
        return updated.with_changes(func=func.with_changes(attr=cst.Name("to")), args=args)

    def _cuda_device(self, index: cst.BaseExpression | None) -> cst.BaseExpression | None:
        """The accelerator's device for ``.cuda(index)``: the current one for none (or
        ``None``), ``device_name(i)`` for a provable int or a ``'cuda:N'`` string; else None."""
        if index is None or m.matches(index, m.Name("None")):
            return self._accelerator_call("device_name")
        if self._is_int(index):
            return self._accelerator_call("device_name", [cst.Arg(index)])
        return self._device_string(index)

    def _note_own_method(self, node: cst.CSTNode, name: str) -> None:
        """A tensor-method rule on a name this module's classes define themselves."""
        if name in ("cuda", "pin_memory", "is_cuda"):
            self._manual(
                node,
                f".{name} is also a method of a class in this module, so this receiver may not "
                "be a tensor or module; left as it is (rewrite it by hand where it is one)",
            )

    def _rewrite_device_positions(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        args = list(updated.args)
        func = updated.func
        positional_device = isinstance(func, cst.Attribute) and (
            func.attr.value in ("to", "set_device")
            or (func.attr.value in ("device", "set_default_device", "autocast")
                and self._is_torch(func.value))
            or (func.attr.value in ("autocast", "GradScaler")
                and isinstance(func.value, cst.Attribute) and func.value.attr.value == "amp"
                and self._is_torch(func.value.value))
        )  # fmt: skip
        is_init = m.matches(
            updated.func,
            m.Attribute(attr=m.Name("init_process_group")) | m.Name("init_process_group"),
        )
        # FSDP(..., device_id=d) takes a device (an int means cuda:<int>).
        is_fsdp = m.matches(
            func,
            m.Name("FSDP") | m.Name("FullyShardedDataParallel")
            | m.Attribute(attr=m.Name("FullyShardedDataParallel")),
        )  # fmt: skip
        for position, arg in enumerate(args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            first = keyword is None and position == 0
            fsdp_device = is_fsdp and keyword == "device_id"
            if keyword in DEVICE_KEYWORDS or (first and positional_device) or fsdp_device:
                replacement, rule = self._as_device(arg.value), "device-position"
                # set_device(i) takes an index as it is; elsewhere an int means cuda:<i>.
                takes_int = (
                    fsdp_device
                    or keyword in ("device", "map_location")
                    or (
                        keyword is None
                        and not m.matches(func, m.Attribute(attr=m.Name("set_device")))
                    )
                )
                if replacement is None and takes_int and self._is_int(arg.value):
                    replacement = self._accelerator_call("device_name", [cst.Arg(arg.value)])
                    rule = "int-device"
            elif keyword == "backend" or (first and is_init):
                replacement, rule = self._as_backend(arg.value), "backend"
            elif keyword == "device_id" and is_init:
                replacement, rule = self._process_group_device_id(arg.value), "device-id"
            else:
                continue
            if replacement is not None:
                self._note_device(original.args[position].value, arg.value, replacement, rule)
                args[position] = arg.with_changes(value=replacement)
            elif rule in ("device-position", "int-device"):
                self._note_cuda_device(original.args[position].value, arg.value)
        if self._is_ddp(func):
            args = self._ddp_arguments(original, args)
        return updated.with_changes(args=args)

    def _process_group_device_id(self, value: cst.BaseExpression) -> cst.BaseExpression | None:
        """``device_id=d`` -> ``device_id=process_group_device_id(d)``: torch refuses a CPU
        device there, and the function gives None on the CPU."""
        local = self._accel_name("process_group_device_id")
        if m.matches(value, m.Call(func=m.Name(local.value)) | m.Name("None")):
            return None  # already device-generic
        self.imports.add("process_group_device_id")
        inner = self._as_device(value) or value
        return cst.Call(func=local, args=[cst.Arg(inner)])

    def _is_int(self, node: cst.BaseExpression) -> bool:
        """Whether ``node`` is provably an ``int`` here (ModuleFacts says when): also
        ``int(...)`` and ``x % <...>.device_count()`` written in place, as ModuleFacts takes
        them assigned."""
        if isinstance(node, cst.Integer) or m.matches(node, m.Call(func=m.Name("int"))):
            return True
        if m.matches(
            node,
            m.BinaryOperation(
                # x % n, not a string's "%" formatting ("cuda:%d" % n)
                left=~(m.SimpleString() | m.ConcatenatedString() | m.FormattedString()),
                operator=m.Modulo(),
                right=m.Call(func=m.Attribute(attr=m.Name("device_count")), args=[]),
            ),
        ):
            return True
        if isinstance(node, cst.Name):
            return (tuple(self.scope), node.value) in self.facts.int_device_uses
        return (
            isinstance(node, cst.Attribute)
            and isinstance(node.value, cst.Name)
            and node.value.value == "self"
            and (class_of(tuple(self.scope), self.facts.class_scopes), node.attr.value)
            in self.facts.int_attributes
        )

    def _is_ddp(self, func: cst.BaseExpression) -> bool:
        if isinstance(func, cst.Name):
            return func.value in self.facts.ddp_names
        return isinstance(func, cst.Attribute) and func.attr.value == DDP_NAME

    def _ddp_arguments(self, original: cst.Call, args: list[cst.Arg]) -> list[cst.Arg]:
        """``device_ids=[i]`` -> ``ddp_device_ids(i)``, ``output_device=i`` ->
        ``ddp_output_device(i)``: a list (None) on accelerators (the CPU), as DDP wants."""
        code = cst.Module([]).code_for_node
        if len([a for a in args if a.keyword is None and not a.star]) > 1:
            self._manual(original, "DistributedDataParallel's device_ids/output_device given "
                         "by position: DDP on the CPU needs None; pass device_ids="
                         "accel.ddp_device_ids(i), output_device=accel.ddp_output_device(i)")  # fmt: skip
        for position, arg in enumerate(args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            value = arg.value
            if keyword == "device_ids":
                if not isinstance(value, cst.List | cst.Tuple):
                    continue  # an expression: it may already choose None for the CPU
                element = value.elements[0] if len(value.elements) == 1 else None
                if not isinstance(element, cst.Element):
                    self._manual(original.args[position], "device_ids= that is not one device: "
                                 "DDP on the CPU needs None; use accel.ddp_device_ids(i)")  # fmt: skip
                    continue
                function, inner = "ddp_device_ids", element.value
            elif keyword == "output_device":
                if _calls(value, "ddp_output_device") or (
                    isinstance(value, cst.Name) and value.value == "None"
                ):
                    continue  # ported already, or nothing to port
                function, inner = "ddp_output_device", value
            else:
                continue
            replacement = cst.Call(func=self._accel_name(function), args=[cst.Arg(inner)])
            self.imports.add(function)
            self._note(original.args[position], f"{keyword}={code(value)} -> "
                       f"{keyword}={code(replacement)} (None on the CPU)", rule="ddp")  # fmt: skip
            args[position] = arg.with_changes(value=replacement)
        return args

    def _note_device(
        self,
        original: cst.BaseExpression,
        before: cst.BaseExpression,
        after: cst.BaseExpression,
        rule: str,
    ) -> None:
        self._drop_choice_findings(original)
        line, column = self._position(original)
        func = original.func if isinstance(original, cst.Call) else None
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "current_device"
            and self._is_torch_cuda(func.value)
        ):
            # One finding for the site: the inner call was already rewritten to current_device()
            # and noted just now (children are left before their parent), so it is the last.
            if self.findings and (self.findings[-1].line, self.findings[-1].column) == (
                line,
                column,
            ):
                self.findings.pop()
            before = original
        code = cst.Module([]).code_for_node
        expected = "a backend" if rule == "backend" else "a device"
        message = f"{code(before)} -> {code(after)} ({expected} is expected here)"
        self.findings.append(Finding(line, column, message, True, rule))

    @override
    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> cst.Import:
        for alias in original_node.names:
            dotted = alias.evaluated_name
            if dotted.startswith("torch.cuda.") and alias.asname is not None:
                self._manual(alias, f"import {dotted} as {alias.evaluated_alias} binds a CUDA-only "
                             "module; call its functions through get_accelerator() instead")  # fmt: skip
        return updated_node

    @override
    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom:
        module = original_node.module
        dotted = cst.Module([]).code_for_node(module) if module is not None else ""
        if original_node.relative or not (
            dotted == "torch.cuda" or dotted.startswith("torch.cuda.")
        ):
            return updated_node
        if isinstance(original_node.names, cst.ImportStar):
            what = f"from {dotted} import * binds CUDA-only names under their own names"
        else:
            names = ", ".join(alias.evaluated_name for alias in original_node.names)
            what = f"from {dotted} import {names} binds CUDA-only names"
        self._manual(original_node, f"{what}; call them as get_accelerator().<name>(...) instead")
        return updated_node

    def _note_dynamic_lookup(self, call: cst.Call) -> None:
        """``getattr(torch.cuda, name)``: which function runs is decided at run time;
        ``getattr(torch, "cuda")`` hands out the module itself."""
        if (
            isinstance(call.func, cst.Name)
            and call.func.value == "getattr"
            and len(call.args) >= 2
            and self._is_torch(call.args[0].value)
            and _literal(call.args[1].value) == "cuda"
        ):
            self._manual(call, _CUDA_MODULE_ADVICE.format(what='getattr(torch, "cuda")'))
        elif (
            isinstance(call.func, cst.Name)
            and call.func.value in ("getattr", "hasattr")
            and call.args
            and self._is_torch_cuda(call.args[0].value)
        ):
            self._manual(
                call,
                f"{call.func.value}(torch.cuda, ...) looks CUDA functions up by name; use the "
                "accelerator's (getattr(get_accelerator(), ...)) where the name is one accel has",
            )

    @override
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        self._note_dynamic_lookup(original_node)
        rewritten = self._rewrite_format_call(original_node)
        if rewritten is not None:
            return rewritten
        rewritten = self._rewrite_torch_cuda_call(original_node, updated_node)
        if rewritten is not None:
            return rewritten
        rewritten = self._rewrite_tensor_method(original_node, updated_node)
        if rewritten is not None:
            return rewritten
        return self._rewrite_device_positions(original_node, updated_node)

    @override
    def leave_Subscript(
        self, original_node: cst.Subscript, updated_node: cst.Subscript
    ) -> cst.BaseExpression:
        value = updated_node.value
        if (
            isinstance(value, cst.Attribute)
            and self._is_torch_cuda(value.value)
            and value.attr.value == "default_generators"
            and len(updated_node.slice) == 1
            and isinstance(updated_node.slice[0].slice, cst.Index)
        ):
            index = updated_node.slice[0].slice.value
            self._note(
                original_node,
                "torch.cuda.default_generators[i] -> get_accelerator().default_generator(i)",
                rule="default-generators",
            )
            return self._accelerator_call("default_generator", [cst.Arg(index)])
        return updated_node

    def _note_nvtx_member(self, node: cst.Attribute) -> None:
        """Report ``torch.cuda.nvtx.<name>`` where its call is not rewritten: a member accel
        has no equivalent of (``range``, ``mark``), or ``range_push/pop`` not called."""
        name = node.attr.value
        if name not in NVTX:
            self._manual(node, f"torch.cuda.nvtx.{name} has no accel equivalent (ProfilerAPI "
                         "has range_push/range_pop); left as it is")  # fmt: skip
        elif id(node) not in self._called:
            self._manual(node, f"torch.cuda.nvtx.{name} is referenced, not called: use "
                         f"get_accelerator().{name} (ProfilerAPI)")  # fmt: skip

    @override
    def visit_Import(self, node: cst.Import) -> bool:
        return False  # `import torch.cuda` names the module; it is not a use of it

    @override
    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    @override
    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if (
            id(original_node) not in self._owners
            and id(original_node) not in self._not_read
            and self._is_torch_cuda(original_node)
        ):
            # `f(tc)` after `import torch.cuda as tc`: as `f(torch.cuda)`.
            what = f"{original_node.value} (torch.cuda)"
            self._manual(original_node, _CUDA_MODULE_ADVICE.format(what=what))
        return updated_node

    @override
    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        if self._is_torch_cuda(original_node) and id(original_node) not in self._owners:
            # `cu = torch.cuda`, `f(torch.cuda)`: the calls made through the other name are
            # out of every rule's sight.
            self._manual(original_node, _CUDA_MODULE_ADVICE.format(what="torch.cuda"))
        if updated_node.attr.value == "is_cuda" and "is_cuda" in self.facts.own_methods:
            self._note_own_method(original_node, "is_cuda")
        elif updated_node.attr.value == "is_cuda" and not self._is_torch(original_node.value):
            # Not rewritten: get_accelerator().on_accelerator(t) is true for a CPU tensor on
            # the CPU backend, and code behind is_cuda is often CUDA's own (a kernel, a
            # data_parallel): it would then run where it did not.
            self._manual(original_node, ".is_cuda guards CUDA-only code as often as it asks "
                         "where a tensor is: use get_accelerator().on_accelerator(t) where the "
                         "code behind it runs on every accelerator (the CPU backend's included)")  # fmt: skip
        owner = original_node.value
        if (
            isinstance(owner, cst.Attribute)
            and owner.attr.value == "nvtx"
            and self._is_torch_cuda(owner.value)
        ):
            self._note_nvtx_member(original_node)
        if self._is_torch_cuda(original_node.value):
            name = original_node.attr.value
            if name in GRAPH_NAMES:
                self._manual(original_node, f"torch.cuda.{name}: {GRAPH_ADVICE}")
            elif name == "nvtx":
                if id(original_node) not in self._owners:
                    self._manual(
                        original_node, "torch.cuda.nvtx is referenced: use "
                        "get_accelerator().range_push/range_pop (ProfilerAPI)",
                    )  # fmt: skip
            elif name not in DIRECT | STREAM_NAMES | FUNCTIONS.keys() and name not in (
                "default_generators",
            ):
                self._manual(
                    original_node,
                    f"torch.cuda.{name} "
                    + _NO_EQUIVALENT.get(name, "has no accel equivalent")
                    + "; left as it is",
                )
            elif id(original_node) not in self._called and name != "default_generators":
                # Passed as a value (a callback, isinstance(s, torch.cuda.Stream)): the calls
                # are rewritten, a reference is a person's to change.
                advice = (
                    STREAM_ADVICE.format(name=name)
                    if name in STREAM_NAMES
                    else f"use get_accelerator().{name}"
                )
                self._manual(
                    original_node, f"torch.cuda.{name} is referenced, not called: {advice}"
                )
        return updated_node
