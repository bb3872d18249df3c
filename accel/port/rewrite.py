"""The libcst transformer behind ``accel port``: torch.cuda code -> accelerator-agnostic code.

Formatting and comments are preserved (libcst edits the concrete syntax tree). Rules,
following DeepSpeed's porting guide:

- ``torch.cuda.<fn>(...)`` -> ``get_accelerator().<fn>(...)`` for every function accel has;
- ``torch.cuda.current_device()`` -> ``current_device_name()`` where a device is expected
  (``device=``/``map_location=`` arguments, ``.to(...)``, ``torch.device(...)``), else
  ``current_device()``;
- ``torch.cuda.default_generators[i]`` -> ``get_accelerator().default_generator(i)``;
- ``'cuda'``, ``'cuda:N'``, ``f'cuda:{i}'`` in those device positions only ->
  ``device_name()``, ``device_name(N)``, ``device_name(i)``; other strings are left alone;
- ``t.cuda(...)`` -> ``t.to(get_accelerator().device_name(...))``; ``t.is_cuda`` ->
  ``get_accelerator().on_accelerator(t)``; ``t.pin_memory()`` ->
  ``get_accelerator().pin_memory(t)``;
- ``init_process_group('nccl', ...)`` and ``backend='nccl'`` ->
  ``get_accelerator().communication_backend_name()``;
- anything else under ``torch.cuda`` (graphs, ``amp``, ...) is left as it is and reported
  with its position and what to do by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

# torch.cuda functions with the same name and meaning on every accel backend.
DIRECT = frozenset({
    "is_available", "device_count", "synchronize", "set_device", "current_device",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "reset_peak_memory_stats", "empty_cache", "manual_seed", "manual_seed_all",
    "initial_seed", "get_rng_state", "set_rng_state", "is_bf16_supported",
    "Stream", "Event", "stream", "current_stream", "default_stream",
})  # fmt: skip
NVTX = frozenset({"range_push", "range_pop"})
GRAPH_NAMES = frozenset(
    {"CUDAGraph", "graph", "graphs", "make_graphed_callables", "graph_pool_handle"}
)
DEVICE_KEYWORDS = frozenset({"device", "map_location"})
GRAPH_ADVICE = (
    "no safe automatic rewrite; use get_accelerator().create_graph()/capture_to_graph()/"
    "replay_graph() behind `if isinstance(acc, GraphAPI)`"
)


@dataclass(frozen=True)
class Finding:
    """One place ``accel port`` changed, or would change, or needs a person."""

    line: int
    column: int
    message: str
    rewritten: bool


def _is_torch_cuda(node: cst.BaseExpression) -> bool:
    return m.matches(node, m.Attribute(value=m.Name("torch"), attr=m.Name("cuda")))


def _accelerator_call(method: str, args: Sequence[cst.Arg] = ()) -> cst.Call:
    accelerator = cst.Call(func=cst.Name("get_accelerator"))
    return cst.Call(func=cst.Attribute(value=accelerator, attr=cst.Name(method)), args=list(args))


def _device_string(node: cst.BaseExpression) -> cst.Call | None:
    """``get_accelerator().device_name(...)`` for 'cuda', 'cuda:N', f'cuda:{i}'; else None."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        if value == "cuda":
            return _accelerator_call("device_name")
        if isinstance(value, str) and value.startswith("cuda:") and value[5:].isdigit():
            return _accelerator_call("device_name", [cst.Arg(cst.Integer(value[5:]))])
    if isinstance(node, cst.FormattedString) and len(node.parts) == 2:
        text, expression = node.parts
        if (
            isinstance(text, cst.FormattedStringText)
            and text.value == "cuda:"
            and isinstance(expression, cst.FormattedStringExpression)
            and expression.format_spec is None
            and expression.conversion is None
        ):
            return _accelerator_call("device_name", [cst.Arg(expression.expression)])
    return None


def _current_device_as_name(node: cst.BaseExpression) -> cst.Call | None:
    if m.matches(
        node,
        m.Call(
            func=m.Attribute(
                value=m.Call(func=m.Name("get_accelerator")), attr=m.Name("current_device")
            ),
            args=[],
        ),
    ):
        return _accelerator_call("current_device_name")
    return None


def _as_device(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """The agnostic form of an expression standing where a device is expected, if any."""
    return _device_string(node) or _current_device_as_name(node)


class PortTransformer(cst.CSTTransformer):
    """Applies the rules; ``findings`` lists every change and every manual site."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.findings: list[Finding] = []

    def _position(self, node: cst.CSTNode) -> tuple[int, int]:
        position = self.get_metadata(PositionProvider, node)
        assert isinstance(position, CodeRange)  # every node of the parsed module has one
        return position.start.line, position.start.column + 1

    def _note(self, node: cst.CSTNode, message: str, rewritten: bool = True) -> None:
        line, column = self._position(node)
        self.findings.append(Finding(line, column, message, rewritten))

    # torch.cuda.<fn>(...) and torch.cuda.nvtx.<fn>(...)
    def _rewrite_torch_cuda_call(
        self, original: cst.Call, updated: cst.Call
    ) -> cst.BaseExpression | None:
        func = updated.func
        if not isinstance(func, cst.Attribute):
            return None
        name = func.attr.value
        if _is_torch_cuda(func.value) and name in DIRECT:
            self._note(original, f"torch.cuda.{name}() -> get_accelerator().{name}()")
            return _accelerator_call(name, updated.args)
        nvtx = m.Attribute(value=m.Name("torch"), attr=m.Name("cuda"))
        if m.matches(func.value, m.Attribute(value=nvtx, attr=m.Name("nvtx"))) and name in NVTX:
            self._note(
                original, f"torch.cuda.nvtx.{name}() -> get_accelerator().{name}() (ProfilerAPI)"
            )
            return _accelerator_call(name, updated.args)
        return None

    def _rewrite_tensor_method(
        self, original: cst.Call, updated: cst.Call
    ) -> cst.BaseExpression | None:
        func = updated.func
        if not isinstance(func, cst.Attribute) or _is_torch_cuda(func):
            return None
        owner = func.value
        if func.attr.value == "cuda" and not m.matches(owner, m.Name("torch")):
            index = [a for a in updated.args if a.keyword is None][:1]
            rest = [a for a in updated.args if a.keyword is not None]
            device = _accelerator_call(
                "device_name", [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in index]
            )
            self._note(original, f".cuda(...) -> .to({cst.Module([]).code_for_node(device)})")
            return updated.with_changes(
                func=func.with_changes(attr=cst.Name("to")), args=[cst.Arg(device), *rest]
            )
        if func.attr.value == "pin_memory" and not updated.args:
            self._note(original, ".pin_memory() -> get_accelerator().pin_memory(t)")
            return _accelerator_call("pin_memory", [cst.Arg(owner)])
        return None

    def _rewrite_device_positions(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        args = list(updated.args)
        positional_device = m.matches(updated.func, m.Attribute(attr=m.Name("to"))) or m.matches(
            updated.func, m.Attribute(value=m.Name("torch"), attr=m.Name("device"))
        )
        is_init = m.matches(
            updated.func,
            m.Attribute(attr=m.Name("init_process_group")) | m.Name("init_process_group"),
        )
        for position, arg in enumerate(args):
            replacement: cst.BaseExpression | None = None
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword in DEVICE_KEYWORDS or (
                keyword is None and position == 0 and positional_device
            ):
                replacement = _as_device(arg.value)
            elif (
                keyword == "backend" or (keyword is None and position == 0 and is_init)
            ) and m.matches(arg.value, m.SimpleString()):
                string = arg.value
                assert isinstance(string, cst.SimpleString)
                if string.evaluated_value == "nccl":
                    replacement = _accelerator_call("communication_backend_name")
            if replacement is not None:
                self._note_device(original.args[position].value, arg.value, replacement)
                args[position] = arg.with_changes(value=replacement)
        return updated.with_changes(args=args)

    def _note_device(
        self, original: cst.BaseExpression, before: cst.BaseExpression, after: cst.BaseExpression
    ) -> None:
        line, column = self._position(original)
        if m.matches(
            original,
            m.Call(
                func=m.Attribute(
                    value=m.Attribute(value=m.Name("torch"), attr=m.Name("cuda")),
                    attr=m.Name("current_device"),
                )
            ),
        ):
            # One finding for the site: the inner call was already rewritten to current_device().
            self.findings = [f for f in self.findings if (f.line, f.column) != (line, column)]
            before = original
        code = cst.Module([]).code_for_node
        self.findings.append(
            Finding(
                line, column, f"{code(before)} -> {code(after)} (a device is expected here)", True
            )
        )

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        rewritten = self._rewrite_torch_cuda_call(original_node, updated_node)
        if rewritten is not None:
            return rewritten
        rewritten = self._rewrite_tensor_method(original_node, updated_node)
        if rewritten is not None:
            return rewritten
        return self._rewrite_device_positions(original_node, updated_node)

    def leave_Subscript(
        self, original_node: cst.Subscript, updated_node: cst.Subscript
    ) -> cst.BaseExpression:
        value = updated_node.value
        if (
            isinstance(value, cst.Attribute)
            and _is_torch_cuda(value.value)
            and value.attr.value == "default_generators"
            and len(updated_node.slice) == 1
            and isinstance(updated_node.slice[0].slice, cst.Index)
        ):
            index = updated_node.slice[0].slice.value
            self._note(
                original_node,
                "torch.cuda.default_generators[i] -> get_accelerator().default_generator(i)",
            )
            return _accelerator_call("default_generator", [cst.Arg(index)])
        return updated_node

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        if updated_node.attr.value == "is_cuda" and not m.matches(
            updated_node.value, m.Name("torch")
        ):
            self._note(original_node, ".is_cuda -> get_accelerator().on_accelerator(t)")
            return _accelerator_call("on_accelerator", [cst.Arg(updated_node.value)])
        if _is_torch_cuda(original_node.value):
            name = original_node.attr.value
            if name in GRAPH_NAMES:
                self._note(original_node, f"torch.cuda.{name}: {GRAPH_ADVICE}", rewritten=False)
            elif name not in DIRECT and name not in ("nvtx", "default_generators"):
                self._note(
                    original_node,
                    f"torch.cuda.{name} has no accel equivalent; left as it is",
                    rewritten=False,
                )
        return updated_node


@dataclass(frozen=True)
class PortResult:
    """The rewritten source and what was found."""

    source: str
    findings: list[Finding]

    @property
    def changed(self) -> bool:
        """Whether any rule rewrote something."""
        return any(f.rewritten for f in self.findings)


def port_source(source: str) -> PortResult:
    """Port one module's source text; ``libcst.ParserSyntaxError`` if it does not parse."""
    wrapper = MetadataWrapper(cst.parse_module(source))
    transformer = PortTransformer()
    module = wrapper.visit(transformer)
    findings = sorted(transformer.findings, key=lambda f: (f.line, f.column))
    if any(f.rewritten for f in findings):
        context = CodemodContext()
        AddImportsVisitor.add_needed_import(context, "accel", "get_accelerator")
        module = AddImportsVisitor(context).transform_module(module)
    return PortResult(module.code, findings)
