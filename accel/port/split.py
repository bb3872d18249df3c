"""Cut a module's source at its top-level statements, and add one import, in linear time.

``accel port`` parses with libcst only the statements that can match a rule: libcst costs
tens of microseconds and hundreds of bytes of memory per source byte, so a 5 MB generated
file parsed whole took minutes and gigabytes. The cut uses the standard tokenizer
(streaming, constant memory). It also refuses, as CPython does, nesting deeper than
CPython compiles (200 brackets, 100 indentation levels): libcst's parser crashes the
interpreter on such input instead of raising.
"""

from __future__ import annotations

import ast
import io
import itertools
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass

MAX_BRACKETS = 200  # CPython: "too many nested parentheses"
MAX_INDENT = 100  # CPython: "too many levels of indentation"
_OPENING, _CLOSING = frozenset("([{"), frozenset(")]}")
# Clauses that continue a compound statement at its own indentation.
_CLAUSES = frozenset({"else", "elif", "except", "finally"})
# Line ends as Python's tokenizer sees them (str.splitlines also splits at form feeds,
# U+2028, U+0085 and others, which are not line ends in Python source).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def source_lines(source: str) -> list[str]:
    """``source``'s lines with their ends, cut where Python's tokenizer cuts them.

    Args:
        source: Python source text.

    Returns:
        The lines, each with its ``"\\n"``, ``"\\r\\n"`` or ``"\\r"`` (the last line
        without one where the text does not end in one); ``"".join`` of them is
        ``source``.
    """
    return _LINE.findall(source)


class SourceError(ValueError):
    """The source cannot be cut into statements (it does not tokenize, or nests too deep)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass(frozen=True)
class Chunk:
    """Consecutive whole lines of the source, starting at 1-based line ``line``.

    ``longest`` is the token count of its longest logical line (libcst's parser recurses
    per nesting level and crashes the interpreter past a few thousand levels, which
    needs at least twice as many tokens on one logical line).
    """

    line: int
    text: str
    longest: int = 0


def top_level_chunks(source: str) -> list[Chunk]:
    """``source`` cut before each top-level statement (decorators stay with what they decorate).

    Text before the first statement (comments, blank lines) is a chunk of its own; blank
    lines and comments after a statement stay with it. ``"".join`` of the texts is
    ``source``.

    Args:
        source: A module's source text.

    Returns:
        The chunks, in order, each with its first line and its longest logical line in
        tokens.

    Raises:
        SourceError: ``source`` does not tokenize, or nests brackets or indentation deeper
            than CPython compiles; the message names the line.
    """
    lines = source_lines(source)
    starts = _statement_starts(source)
    if not starts or starts[0][0] != 0:
        starts.insert(0, (0, 0))
    bounds = [*starts, (len(lines), 0)]
    return [
        Chunk(first + 1, "".join(lines[first:end]), longest)
        for (first, longest), (end, _) in itertools.pairwise(bounds)
        if end > first
    ]


def _statement_starts(source: str) -> list[tuple[int, int]]:
    """(0-based first line, longest logical line in tokens) of each top-level statement."""
    starts: list[tuple[int, int]] = []
    depth = brackets = 0
    new_logical_line = True
    after_decorator = False
    tokens_in_line = longest = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            kind = token.type
            tokens_in_line += 1
            if kind == tokenize.INDENT:
                depth += 1
                if depth > MAX_INDENT:
                    raise SourceError(token.start[0], "too many levels of indentation")
            elif kind == tokenize.DEDENT:
                depth -= 1
            elif kind == tokenize.NEWLINE:
                new_logical_line = True
                longest = max(longest, tokens_in_line)
                tokens_in_line = 0
            elif kind not in (tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER):
                if kind == tokenize.OP and token.string in _OPENING:
                    brackets += 1
                    if brackets > MAX_BRACKETS:
                        raise SourceError(token.start[0], "too many nested parentheses")
                elif kind == tokenize.OP and token.string in _CLOSING:
                    brackets -= 1
                if new_logical_line:
                    new_logical_line = False
                    # else/elif/except/finally continue the compound statement before them
                    if depth == 0 and not (kind == tokenize.NAME and token.string in _CLAUSES):
                        if not after_decorator:
                            if starts:
                                starts[-1] = (starts[-1][0], longest)
                            starts.append((token.start[0] - 1, 0))
                            longest = 0
                        after_decorator = token.string == "@"
    except (tokenize.TokenError, IndentationError) as error:
        line = error.lineno if isinstance(error, IndentationError) else error.args[1][0]
        raise SourceError(line or 0, f"does not tokenize: {error.args[0]}") from None
    if starts:
        starts[-1] = (starts[-1][0], max(longest, tokens_in_line))
    return starts


IMPORT_LINE = "from accel import get_accelerator"
_ACCEL_IMPORT = re.compile(r"^from\s+accel\s+import\s+(\([^)]*\)|[^\n]*)", re.MULTILINE)
_LINE_LIMIT = 79  # a longer import is written one name per line, in parentheses
_IMPORT = re.compile(r"(import|from)\s")
_DOCSTRING = re.compile(r"[rRbBuU]{0,2}(\"|')")


def is_statement(chunk: str) -> bool:
    """Whether ``chunk`` holds a statement (not only comments and blank lines).

    Args:
        chunk: A chunk's text, as :func:`top_level_chunks` cuts it.

    Returns:
        ``False`` when it is blank or starts with a comment, else ``True``.
    """
    statement = chunk.lstrip()
    return bool(statement) and not statement.startswith("#")  # not the comments-only prefix


def ends_leading_block(chunk: str, *, first: bool) -> bool:
    """Whether ``chunk`` is a statement after which no import may be added: neither an
    import nor (when it is the ``first`` statement) the module docstring. A line of
    statements joined by ``;`` is an import only if each of them is one.

    Args:
        chunk: A chunk's text, as :func:`top_level_chunks` cuts it.
        first: Whether it is the module's first statement, where a docstring may stand.

    Returns:
        ``True`` for a statement that is neither the leading docstring nor provably
        imports only (one that does not parse is not); else ``False``.
    """
    if not is_statement(chunk):
        return False
    statement = chunk.lstrip()
    if first and _DOCSTRING.match(statement) is not None:
        return False
    if not _IMPORT.match(statement):
        return True
    try:
        body = ast.parse(chunk).body
    except SyntaxError:
        return True  # not provably imports only: nothing goes after it
    return not all(isinstance(node, ast.Import | ast.ImportFrom) for node in body)


def with_import(
    pieces: list[str], newline: str = "\n", names: Iterable[str] = ("get_accelerator",)
) -> list[str]:
    """``pieces`` (runs of whole top-level statements, in order) with ``from accel import
    <names>`` added once (``IMPORT_LINE`` for the usual ``get_accelerator``); a name may
    be ``"<name> as <alias>"``.

    It goes after the module's leading docstring and import statements, directly below
    the last of them (before the blank lines that follow it); names the module already
    imports from accel there (under the same alias, if any) are left out, and nothing is
    added if that is all of them. Only the leading pieces are cut into statements again,
    as far as the first statement that is neither.

    Args:
        pieces: The module's text, in runs of whole top-level statements.
        newline: The line end to write the import with.
        names: The names to import, each ``"<name>"`` or ``"<name> as <alias>"``.

    Returns:
        The pieces with the import added, the leading ones cut into single statements
        (their joined text is ``pieces``' when the module already imports every name).

    Raises:
        SourceError: A leading piece does not tokenize, or nests deeper than CPython
            compiles.
    """
    head: list[str] = []
    seen_statement = False
    for count, piece in enumerate(pieces, start=1):
        chunks = [chunk.text for chunk in top_level_chunks(piece)]
        head.extend(chunks)
        for chunk in chunks:
            if ends_leading_block(chunk, first=not seen_statement):
                return _insert_import(head, newline, set(names)) + pieces[count:]
            seen_statement = seen_statement or is_statement(chunk)
    return _insert_import(head, newline, set(names))


def _insert_import(chunks: list[str], newline: str, names: set[str]) -> list[str]:
    """``chunks`` (single statements: the leading block and the statement after it) with
    the import of ``names`` below the last docstring or import statement."""
    # A name imported under another one ("get_accelerator as acc") does not bind it.
    imported = {
        " ".join(name.strip("()\r\n\t ").split())
        for chunk in chunks
        for found in _ACCEL_IMPORT.findall(chunk)
        for name in found.split(",")
    }
    missing = sorted(names - imported)
    if not missing:
        return chunks
    line = f"from accel import {', '.join(missing)}"
    if len(line) > _LINE_LIMIT:
        line = newline.join(["from accel import (", *(f"    {name}," for name in missing), ")"])
    after = -1  # index of the last chunk of the leading docstring/import block
    for index, chunk in enumerate(chunks):
        if ends_leading_block(chunk, first=after == -1):
            break
        if is_statement(chunk):
            after = index
    result = list(chunks)
    if after == -1:
        # Above the first statement, below the comments that lead the file: a "#!" line
        # and a PEP 263 coding line must stay on lines 1-2.
        first = next((i for i, chunk in enumerate(result) if is_statement(chunk)), len(result))
        if first and not result[first - 1].endswith(("\n", "\r")):
            result[first - 1] += newline
        return [*result[:first], line + newline, *result[first:]]
    body = result[after].rstrip()
    rest = result[after][len(body) :]
    first_end = re.match(r"[ \t]*(\r\n|\n|\r)", rest)
    if first_end is None:  # the file ends on this statement, without a newline
        result[after] = body + rest + newline + line + newline
    else:
        after_line = rest[first_end.end() :]
        result[after] = body + first_end.group(0) + line + first_end.group(1) + after_line
    return result
