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

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

import libcst as cst
import libcst.matchers as m
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from accel.port.split import (
    Chunk,
    ends_leading_block,
    is_statement,
    top_level_chunks,
    with_import,
)

# torch.cuda functions with the same name and meaning on every accel backend.
DIRECT = frozenset({
    "is_available", "device_count", "synchronize", "set_device", "current_device",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "reset_peak_memory_stats", "reset_accumulated_memory_stats", "empty_cache",
    "get_device_properties", "manual_seed", "manual_seed_all",
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
            # One finding for the site: the inner call was already rewritten to current_device()
            # and noted just now (children are left before their parent), so it is the last.
            if self.findings and (self.findings[-1].line, self.findings[-1].column) == (
                line,
                column,
            ):
                self.findings.pop()
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


# Every rule matches code that contains one of these; statements without them are copied
# as they are, unparsed.
TRIGGERS = ("cuda", "nccl", "pin_memory")
# Statements are parsed in batches of about this many characters: small enough that
# libcst's memory stays bounded, large enough that its per-call cost does not matter.
BATCH_CHARS = 64 * 1024
# libcst's visitors recurse once per nesting level of an expression (a 400-term sum is
# 400 levels deep); CPython 3.11 runs Python-to-Python recursion without growing the C
# stack, so a higher limit is safe here.
RECURSION_LIMIT = 20_000
# libcst's parser crashed the interpreter on one logical line of 12,000 tokens (a 6,000-
# long attribute chain; measured with libcst 1.x), parsed every shape tried at 8,000, and
# is superlinear on long chains (a 3,000-term sum: 10 s; 20,000 terms: 295 s, then a
# crash). A statement with a longer logical line is refused, naming its line, in no time.
MAX_LINE_TOKENS = 8_000


class PortError(ValueError):
    """A statement the rewriter cannot process; the message names its line."""


def port_source(source: str) -> PortResult:
    """Port one module's source text.

    ``SourceError`` or ``PortError`` (both ``ValueError``, naming the line) when it
    cannot, e.g. for a statement with a logical line of more than ``MAX_LINE_TOKENS``
    tokens. Cost is linear in the size of the source.
    """
    chunks = top_level_chunks(source)
    pieces: list[str] = []
    findings: list[Finding] = []
    batch: list[Chunk] = []

    def flush() -> None:
        if batch:
            text, batch_findings = _port_batch(batch)
            pieces.append(text)
            findings.extend(batch_findings)
            batch.clear()

    for chunk in chunks:
        if any(trigger in chunk.text for trigger in TRIGGERS):
            if chunk.longest > MAX_LINE_TOKENS:
                raise PortError(
                    f"line {chunk.line}: a logical line of {chunk.longest} tokens is more than "
                    f"the rewriter parses safely ({MAX_LINE_TOKENS}); port it by hand"
                )
            batch.append(chunk)
            if sum(len(c.text) for c in batch) >= BATCH_CHARS:
                flush()
        else:
            flush()
            pieces.append(chunk.text)
    flush()
    findings.sort(key=lambda f: (f.line, f.column))
    if any(f.rewritten for f in findings):
        newline = "\r\n" if "\r\n" in source else "\n"
        pieces = _with_import(pieces, newline)
    return PortResult("".join(pieces), findings)


def _with_import(pieces: list[str], newline: str) -> list[str]:
    # A rewritten batch holds several statements: cut the leading pieces again, as far as
    # the first statement that is no import, so the import goes after the last leading
    # import statement rather than after a whole batch.
    head: list[str] = []
    seen_statement = False
    for count, piece in enumerate(pieces, start=1):
        chunks = [chunk.text for chunk in top_level_chunks(piece)]
        head.extend(chunks)
        for chunk in chunks:
            if ends_leading_block(chunk, first=not seen_statement):
                return with_import(head, newline) + pieces[count:]
            seen_statement = seen_statement or is_statement(chunk)
    return with_import(head, newline)


def _port_batch(batch: list[Chunk]) -> tuple[str, list[Finding]]:
    first_line = batch[0].line
    text = "".join(chunk.text for chunk in batch)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, RECURSION_LIMIT))
    try:
        # unsafe_skip_copy: the tree was just parsed and is not shared, so the deep copy
        # MetadataWrapper makes by default (a third of the time) buys nothing.
        wrapper = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True)
        transformer = PortTransformer()
        module = wrapper.visit(transformer)
        code = module.code
    except RecursionError:
        raise PortError(
            f"line {first_line}: an expression nests too deeply for the rewriter "
            "(it is left unported)"
        ) from None
    except cst.ParserSyntaxError as error:
        line = error.raw_line + first_line - 1  # the batch starts at first_line
        raise PortError(f"line {line}: syntax error: {error.message}") from None
    finally:
        sys.setrecursionlimit(limit)
    shift = first_line - 1
    return code, [replace(f, line=f.line + shift) for f in transformer.findings]
