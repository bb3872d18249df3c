"""The driver of ``accel port``: one module's source in, the ported source and findings out.

Only the top-level statements that can match a rule (:mod:`accel.port.rules`) are parsed,
in batches, with guards that refuse what libcst cannot parse safely; every other statement
is copied as it is. ``from accel import get_accelerator`` is added once where a rule
rewrote something (``get_accelerator as _accel_get_accelerator`` where the module binds
the name itself).
"""

from __future__ import annotations

import ast
import bisect
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import cast

import libcst as cst
from libcst.metadata import MetadataWrapper

from accel.port.facts import ModuleFacts, analyse
from accel.port.rules import RULES, Finding, PortTransformer
from accel.port.split import Chunk, SourceError, top_level_chunks, with_import

__all__ = ["MAX_LINE_TOKENS", "RULES", "Finding", "PortError", "PortResult", "port_source"]


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
# libcst's parser can crash the interpreter on a very long logical line and is superlinear
# on long chains; 8,000 tokens is below every crash seen (docs/benchmarks.md, "accel port
# on large files"). A statement with a longer logical line is refused, naming its line.
MAX_LINE_TOKENS = 8_000
# libcst's parser recurses once per level of expression nesting that no bracket marks
# (lambda: lambda: ..., not not ..., - - x): 3,500 nested lambdas crashed the interpreter
# and 7,900 unary operators took 25 s and 3.4 GB. Left-recursive chains (a + b + c, a.b.c,
# f()()) are loops in the parser and do not count. No real program comes near this.
MAX_NESTING = 500
AST_RECURSION_LIMIT = 10_000


class PortError(ValueError):
    """A statement the rewriter cannot process; the message names its line."""


def _at_pythons_position(error: SyntaxError | None) -> PortError | None:
    """``error`` (Python's own) as a :class:`PortError` naming its line, or None."""
    if error is None or error.lineno is None:
        return None
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return PortError(
        f"line {error.lineno}: {error.msg} (neither Python {version} nor libcst parse it)"
    )


def port_source(source: str) -> PortResult:
    """Port one module's source text.

    Cost is linear in the size of the source.

    Args:
        source: The module's text, with its own line ends (kept in the result).

    Returns:
        The ported text, with ``from accel import ...`` added where a rule needs it, and
        every finding, by position.

    Raises:
        SourceError: The source does not tokenize, or nests brackets or indentation deeper
            than CPython compiles (a ``ValueError``; the message names the line).
        PortError: The module holds a null byte, or has a syntax error (Python's own,
            naming its line; a module over ``ANALYSIS_LIMIT`` characters is not parsed
            whole, and only the statements a rule may match are checked), a logical line
            of more than ``MAX_LINE_TOKENS`` tokens, or an expression nested deeper than
            the rewriter parses safely (a ``ValueError``; the message names the line).
    """
    if "\0" in source:  # Python refuses to compile such a file: it is never ported
        line = source.count("\n", 0, source.index("\0")) + 1
        raise PortError(f"line {line}: source code cannot contain null bytes")
    if "\r" in source and "\n" not in source:
        # Old Mac line ends: Python reads them as line ends, the tokenizer and libcst do
        # not. Port the text with "\n" and give the file its own line ends back.
        result = port_source(source.replace("\r", "\n"))
        return PortResult(result.source.replace("\n", "\r"), result.findings)
    facts = analyse(source)
    try:
        chunks = top_level_chunks(source)
    except SourceError as error:
        # The tokenizer stops where a bracket or a string is still open (often the end of
        # the file); Python's own parser names where the error is.
        found = facts.syntax_error
        if found is None or found.lineno is None:
            raise
        raise SourceError(found.lineno, found.msg) from error
    triggers = TRIGGERS + facts.triggers
    pieces: list[str] = []
    findings: list[Finding] = []
    imports: set[str] = set()
    batch: list[Chunk] = []
    marked = sorted(facts.lines)
    refused = facts.syntax_error
    if refused is not None and refused.lineno is not None:
        # The statement this Python refuses is parsed whatever it holds: libcst (whose
        # grammar follows newer Pythons: `type X = int`) takes newer syntax, and a real
        # syntax error is refused with Python's own line and message, never ported around.
        marked = sorted({*marked, refused.lineno})

    def flush() -> None:
        if batch:
            text, batch_findings, batch_imports = _port_batch(batch, facts)
            pieces.append(text)
            findings.extend(batch_findings)
            imports.update(batch_imports)
            batch.clear()

    try:
        _port_chunks(chunks, triggers, marked, batch, pieces, flush)
    except PortError as failure:
        if refused is None:
            raise
        raise _at_pythons_position(refused) or failure from failure
    findings.sort(key=lambda f: (f.line, f.column))
    ported = "".join(pieces)
    call = f"{facts.local_name('get_accelerator')}()"
    if ported.count(call) > source.count(call):
        imports.add("get_accelerator")  # a rule wrote a call to it
    if imports:
        # Under an alias where the module binds the name itself (ModuleFacts.local_name).
        specs = {
            name if local == name else f"{name} as {local}"
            for name, local in ((name, facts.local_name(name)) for name in imports)
        }
        pieces = with_import(pieces, "\r\n" if "\r\n" in source else "\n", specs)
        ported = "".join(pieces)
    return PortResult(ported, findings)


def _port_chunks(
    chunks: list[Chunk],
    triggers: tuple[str, ...],
    marked: list[int],
    batch: list[Chunk],
    pieces: list[str],
    flush: Callable[[], None],
) -> None:
    """Batch the chunks a rule may match (they hold a trigger or a marked line), after the
    checks that keep libcst's parser safe, and copy the others to ``pieces`` as they are;
    ``flush`` ports the batch into ``pieces``."""
    for chunk in chunks:
        if any(trigger in chunk.text for trigger in triggers) or _holds_a_line(chunk, marked):
            if chunk.longest > MAX_LINE_TOKENS:
                raise PortError(
                    f"line {chunk.line}: a logical line of {chunk.longest} tokens is more than "
                    f"the rewriter parses safely ({MAX_LINE_TOKENS}); port it by hand"
                )
            if chunk.longest > MAX_NESTING:  # every nesting level takes a token or more
                _check_nesting(chunk)
            batch.append(chunk)
            if sum(len(c.text) for c in batch) >= BATCH_CHARS:
                flush()
        else:
            flush()
            pieces.append(chunk.text)
    flush()


def _holds_a_line(chunk: Chunk, marked: list[int]) -> bool:
    """Whether ``chunk`` holds one of the (sorted) lines the analysis marked (an int
    device position, a DDP call), which need not mention "cuda"."""
    if not marked:
        return False
    first = bisect.bisect_left(marked, chunk.line)
    return first < len(marked) and marked[first] <= chunk.line + chunk.text.count("\n")


# The operand of these continues a left-recursive chain (a + b + c, a.b.c, f()(), x[0][1]).
_CHAIN_FIELDS: dict[type[ast.AST], str] = {
    ast.BinOp: "left", ast.Compare: "left", ast.Attribute: "value", ast.Call: "func",
    ast.Subscript: "value",
}  # fmt: skip


def nesting_depth(tree: ast.AST) -> int:
    """How deeply expressions nest in ``tree``, chains counted once (no recursion: the
    depth can be anything CPython's parser accepted).

    Args:
        tree: A parsed tree, or any node of one.

    Returns:
        The most expressions nested in one another, a left-recursive chain of one kind
        (``a + b + c``, ``a.b.c``, ``f()()``, ``x[0][1]``) counting as one level.
    """
    deepest = 0
    pending: list[tuple[ast.AST, int]] = [(tree, 0)]
    while pending:
        node, depth = pending.pop()
        deepest = max(deepest, depth)
        chain = _CHAIN_FIELDS.get(type(node))
        for name, value in ast.iter_fields(node):
            children = cast("list[object]", value) if isinstance(value, list) else [value]
            for child in children:
                if isinstance(child, ast.expr):
                    continues = name == chain and type(child) is type(node)
                    pending.append((child, depth if continues else depth + 1))
                elif isinstance(child, ast.AST):
                    pending.append((child, depth))
    return deepest


def _check_nesting(chunk: Chunk) -> None:
    """``PortError`` naming the line when ``chunk`` nests deeper than libcst parses safely."""
    limit = sys.getrecursionlimit()
    # ast.parse builds its Python objects recursively: a 3,000-term sum needs more than
    # the default 1,000 levels, well within the C stack at this bound.
    sys.setrecursionlimit(max(limit, AST_RECURSION_LIMIT))
    try:
        tree = ast.parse(chunk.text)
    except SyntaxError:
        return  # libcst reports it, with its position
    except (MemoryError, RecursionError):  # CPython's parser refuses it too
        raise PortError(
            f"line {chunk.line}: an expression nests deeper than Python's own parser accepts"
        ) from None
    finally:
        sys.setrecursionlimit(limit)
    depth = nesting_depth(tree)
    if depth > MAX_NESTING:
        raise PortError(
            f"line {chunk.line}: an expression nests {depth} levels deep, more than the "
            f"rewriter parses safely ({MAX_NESTING}); port it by hand"
        )


def _port_batch(batch: list[Chunk], facts: ModuleFacts) -> tuple[str, list[Finding], set[str]]:
    first_line = batch[0].line
    text = "".join(chunk.text for chunk in batch)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, RECURSION_LIMIT))
    try:
        # unsafe_skip_copy: the tree was just parsed and is not shared, so the deep copy
        # MetadataWrapper makes by default (a third of the time) buys nothing.
        wrapper = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True)
        transformer = PortTransformer(facts)
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
    findings = [replace(f, line=f.line + shift) for f in transformer.findings]
    return code, findings, transformer.imports
