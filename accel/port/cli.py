"""``accel port PATH...``: rewrite in place, ``--diff`` to preview, ``--check`` for CI.

Every file is handled on its own: one that cannot be read, decoded, parsed or written is
reported with its path and the reason, and the run goes on with the others (exit status 2
at the end). A file is never left half-written: the new text goes to a temporary file in
the same directory, which then replaces the original in one rename (mode kept). Encoding
(PEP 263 declarations, a UTF-8 BOM) and line endings are kept as they were.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import signal
import sys
import tempfile
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from accel._output import discard_stdout, stdout_reader_gone
from accel.port.rewrite import RULES, Finding, PortError, PortResult, port_source
from accel.port.split import SourceError, source_lines


@dataclass(frozen=True)
class Source:
    """A file's text as decoded, with what is needed to write it back the same way."""

    text: str
    encoding: str  # "utf-8-sig" when the file starts with a BOM


class Skipped(Exception):
    """A path that is not ported, with the reason (reported, not fatal)."""


@dataclass(frozen=True)
class NotWalked:
    """A path a directory walk leaves out on purpose (a link, a virtual environment, a
    hidden directory): reported on stderr, not an error."""

    reason: str


# Directory names a walk does not enter: installed packages are not the project's code (a
# virtual environment is also recognised by its pyvenv.cfg). __pycache__ holds no sources:
# left out without a word.
_INSTALLED = frozenset({"site-packages", "dist-packages", "node_modules"})


def python_files(paths: Sequence[str]) -> Iterator[Path | Skipped | NotWalked]:
    """The ``.py`` files named or found under ``paths``; a ``Skipped`` for each that is not.

    Directories are walked without following symbolic links (a link could lead out of
    the tree, or loop) and without entering hidden directories (``.git``, ``.venv``),
    virtual environments (a ``pyvenv.cfg``), ``site-packages``, ``dist-packages`` and
    ``node_modules``: each is reported, not an error (``__pycache__``, which holds no
    sources, is left out silently). A link named on
    the command line is ported at its target.

    Args:
        paths: Files and directories, as named on the command line.

    Yields:
        Each file to port (a directory's in sorted walk order); a :class:`Skipped` for a
        name that is neither a file nor a directory; a :class:`NotWalked` for each
        symbolic link to a directory or ``.py`` file, and each directory, left out of a
        walk.
    """
    for name in paths:
        if not name:  # Path("") is ".": an unset shell variable must not port the cwd
            yield Skipped("'': empty path; expected a Python file or a directory")
            continue
        path = Path(name)
        if path.is_dir():
            yield from _walk(path)
        elif path.is_file():
            yield path.resolve() if path.is_symlink() else path
        elif path.exists():
            yield Skipped(f"{name}: not a regular file or directory; left alone")
        else:
            yield Skipped(f"{name}: no such file or directory")


def _walk(root: Path) -> Iterator[Path | NotWalked | Skipped]:
    found: list[Path | NotWalked | Skipped] = []

    def unreadable(error: OSError) -> None:
        found.append(Skipped(f"{error.filename}: cannot be read: {error.strerror or error}"))

    for directory, subdirectories, files in os.walk(root, onerror=unreadable, followlinks=False):
        entered: list[str] = []
        for name in sorted(subdirectories):
            path = Path(directory, name)
            if path.is_symlink():
                found.append(NotWalked(f"{path}: symbolic link not followed"))
            elif name == "__pycache__":
                continue
            elif name.startswith("."):
                found.append(NotWalked(f"{path}: hidden directory not walked"))
            elif _is_file(path / "pyvenv.cfg"):
                found.append(NotWalked(f"{path}: virtual environment not walked"))
            elif name in _INSTALLED:
                found.append(NotWalked(f"{path}: installed packages not walked"))
            else:
                entered.append(name)
        subdirectories[:] = entered
        for name in sorted(files):
            path = Path(directory, name)
            if not name.endswith(".py"):
                continue
            if path.is_symlink():
                found.append(NotWalked(f"{path}: symbolic link not followed"))
            elif not _is_file(path):  # a FIFO would block the read for ever
                found.append(NotWalked(f"{path}: not a regular file, not read"))
            else:
                found.append(path)
    yield from found


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False where it cannot be told (a directory that cannot be entered)."""
    try:
        return path.is_file()
    except OSError:
        return False


def read_source(path: Path) -> Source:
    """Decode ``path`` as Python does (BOM, PEP 263 declaration, else UTF-8), newlines kept.

    Args:
        path: A Python file.

    Returns:
        Its text and the encoding to write it back in.

    Raises:
        Skipped: The encoding declaration is invalid or names an unknown codec, or the
            bytes do not decode.
        OSError: The file cannot be read.
    """
    data = path.read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return Source(data.decode(encoding), encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as error:
        raise Skipped(f"{path}: cannot be ported: cannot decode it: {error}") from None


def write_atomically(path: Path, text: str, encoding: str) -> None:
    """Replace ``path``'s content by ``text``, all at once or not at all, keeping its
    owner, group and mode.

    The text goes to a temporary file in the same directory, which then replaces ``path``;
    on any failure the temporary file is removed and ``path`` is left as it was.

    Args:
        path: The file to replace.
        text: Its new content.
        encoding: The codec to encode ``text`` with.

    Raises:
        UnicodeEncodeError: ``text`` cannot be encoded in ``encoding``.
        LookupError: ``encoding`` names no codec.
        OSError: ``path`` or its directory cannot be read or written, or the owner cannot
            be kept.
    """
    data = text.encode(encoding)
    status = path.stat()
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".port", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            if (status.st_uid, status.st_gid) != (os.getuid(), os.getgid()):
                # Keep the owner (root porting another user's file); only root may give a
                # file away, and anyone else could not have written this one anyway.
                os.fchown(out.fileno(), status.st_uid, status.st_gid)
            os.fchmod(out.fileno(), status.st_mode & 0o7777)  # after chown, which clears setuid
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def run(
    paths: Sequence[str],
    *,
    diff: bool = False,
    check: bool = False,
    strict: bool = False,
    explain: bool = False,
) -> int:
    """Port ``paths``; returns the exit status.

    1: ``--check`` found something to rewrite (with ``strict``, also something manual);
    2: some file could not be handled. ``explain`` prints each finding's rule and why it
    is safe.

    Each file that cannot be handled is reported on stderr with the reason, and the run
    goes on with the others.

    Args:
        paths: Python files and directories to port.
        diff: Print a unified diff instead of rewriting.
        check: Print the findings as ``path:line:col`` instead of rewriting.
        strict: With ``check``, count findings that need a person (``manual:``) too.
        explain: Print each finding with its rule and why the rewrite is safe.

    Returns:
        2 when some file could not be handled; else 1 when ``check`` found something to
        rewrite (with ``strict``, any finding); else 0.
    """
    if hasattr(signal, "SIGXFSZ"):
        # Past a file-size limit (ulimit -f) the kernel kills the process by default;
        # ignored, the write fails with EFBIG and is reported like a full disk.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    status = 0
    for path in python_files(paths):
        if isinstance(path, NotWalked):
            print(path.reason, file=sys.stderr)
            continue
        try:
            if isinstance(path, Skipped):
                raise path
            try:
                found = _port_file(path, diff=diff, check=check, strict=strict, explain=explain)
            except BrokenPipeError:
                if diff or check or not stdout_reader_gone():
                    raise  # nothing is left to do but to say things, or not stdout's
                # Ported in place, the files are the point: this one (porting twice is
                # porting once) and the rest are ported, unread.
                discard_stdout()
                found = _port_file(path, diff=diff, check=check, strict=strict, explain=explain)
        except Skipped as skipped:
            print(skipped, file=sys.stderr)
            status = 2
            continue
        if found and status == 0:
            status = 1
    return status


def _port_file(path: Path, *, diff: bool, check: bool, strict: bool, explain: bool) -> bool:
    """Port one file; whether ``--check`` found something. ``Skipped`` says why it failed."""
    try:
        source = read_source(path)
    except OSError as error:
        raise Skipped(f"{path}: cannot be read: {error.strerror or error}") from None
    try:
        result = port_source(source.text)
    except RecursionError:
        raise Skipped(f"{path}: cannot be ported: it nests too deeply") from None
    except (PortError, SourceError) as error:  # the message names the line
        raise Skipped(f"{path}: cannot be ported: {error}") from None
    except Exception as error:  # one file's failure, whatever it is, must not stop the run
        raise Skipped(f"{path}: cannot be ported: {type(error).__name__}: {error}") from None
    if explain:
        for finding in result.findings:
            _print_finding(path, finding, explain=True)
    if check:
        if not explain:
            for finding in result.findings:
                _print_finding(path, finding, explain=False)
        return any(f.rewritten or strict for f in result.findings)
    if diff:
        sys.stdout.writelines(
            difflib.unified_diff(
                source_lines(source.text),
                source_lines(result.source),
                fromfile=f"a/{path}",
                tofile=f"b/{path}",
            )
        )
        return False
    _write_back(path, source, result, explain=explain)
    return False


def _write_back(path: Path, source: Source, result: PortResult, *, explain: bool) -> None:
    if result.changed:
        # No write permission bit at all is read-only even for root, who could write it.
        if not os.access(path, os.W_OK) or not path.stat().st_mode & 0o222:
            raise Skipped(f"{path}: is read-only; left unchanged")
        links = path.stat().st_nlink
        if links > 1:  # a replace would leave the other names with the old text
            raise Skipped(
                f"{path}: has {links} hard links; left unchanged (port a copy, or one link)"
            )
        try:
            write_atomically(path, result.source, source.encoding)
        except OSError as error:
            raise Skipped(
                f"{path}: cannot be written ({error.strerror or error}); left unchanged"
            ) from None
        print(f"{path}: {sum(f.rewritten for f in result.findings)} change(s)")
    if not explain:
        for finding in result.findings:
            if not finding.rewritten:
                _print_finding(path, finding, explain=False)


def _print_finding(path: Path, finding: Finding, *, explain: bool) -> None:
    kind = "" if finding.rewritten else "manual: "
    line = f"{path}:{finding.line}:{finding.column}: {kind}{finding.message}"
    if explain:
        line += f"\n    [{finding.rule}] {RULES.get(finding.rule, '')}"
    print(line)
