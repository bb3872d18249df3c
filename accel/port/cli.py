"""``accel port PATH...``: rewrite in place, ``--diff`` to preview, ``--check`` for CI."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import libcst as cst

from accel.port.rewrite import port_source


def python_files(paths: Sequence[str]) -> Iterator[Path]:
    """The ``.py`` files named or found (recursively) under ``paths``."""
    for name in paths:
        path = Path(name)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*.py") if p.is_file())
        elif path.is_file():
            yield path
        else:
            raise FileNotFoundError(f"accel port: {name}: no such file or directory")


def run(paths: Sequence[str], *, diff: bool = False, check: bool = False) -> int:
    """Port ``paths``; returns the exit status (1: ``--check`` found something, 2: errors)."""
    status = 0
    for path in python_files(paths):
        try:
            source = path.read_text(encoding="utf-8")
            result = port_source(source)
        except (UnicodeDecodeError, cst.ParserSyntaxError) as error:
            print(f"{path}: cannot be ported: {type(error).__name__}: {error}", file=sys.stderr)
            status = 2
            continue
        if check:
            for finding in result.findings:
                kind = "" if finding.rewritten else "manual: "
                print(f"{path}:{finding.line}:{finding.column}: {kind}{finding.message}")
            if result.findings and status == 0:
                status = 1
        elif diff:
            sys.stdout.writelines(
                difflib.unified_diff(
                    source.splitlines(keepends=True),
                    result.source.splitlines(keepends=True),
                    fromfile=f"a/{path}",
                    tofile=f"b/{path}",
                )
            )
        else:
            if result.changed:
                path.write_text(result.source, encoding="utf-8")
                changes = sum(f.rewritten for f in result.findings)
                print(f"{path}: {changes} change(s)")
            for finding in result.findings:
                if not finding.rewritten:
                    print(f"{path}:{finding.line}:{finding.column}: manual: {finding.message}")
    return status
