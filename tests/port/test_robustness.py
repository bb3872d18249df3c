"""`accel port` on hostile and unusual input: every file on its own, nothing half-written.

Each case here broke a run before: a parser segfault or a recursion error stopped the
whole run naming no file; a full disk or a file-size limit left a file truncated; CRLF,
a BOM and PEP 263 encodings were lost or refused; symlinks were followed out of the tree.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accel.cli import main
from accel.port.rewrite import PortError, port_source
from accel.port.split import SourceError, top_level_chunks

CUDA_LINE = "torch.cuda.synchronize()\n"
PORTED_LINE = "get_accelerator().synchronize()\n"

STATEMENTS = [
    "import torch\n",
    "x = 1; y = torch.cuda.current_device()\n",
    "@decorator\n@other(1)\ndef f(a,\n      b):\n    return torch.ones(2, device='cuda')\n",
    "class C:\n    '''doc'''\n\n    def m(self):\n        pass\n",
    "# a comment\n\n",
    "s = '''multi\nline cuda\n'''\n",
    "if x:\n    torch.cuda.synchronize()\nelse:\n    pass\n",
    "t = (1,\n     2)\n",
]


@given(st.lists(st.sampled_from(STATEMENTS), max_size=12))
def test_cutting_at_statements_loses_nothing(parts: list[str]) -> None:
    source = "".join(parts)
    chunks = top_level_chunks(source)
    assert "".join(chunk.text for chunk in chunks) == source
    for chunk in chunks:
        assert chunk.text == "".join(source.splitlines(keepends=True)[chunk.line - 1 :][: chunk.text.count("\n") or 1]) or not chunk.text.endswith("\n")  # fmt: skip


@given(st.lists(st.sampled_from(STATEMENTS), max_size=12))
def test_porting_by_statement_equals_porting_the_whole_module(parts: list[str]) -> None:
    source = "".join(parts)
    ported = port_source(source)
    # Idempotent, and every rewrite found exactly once wherever the statement stands.
    assert port_source(ported.source).source == ported.source
    expected = sum(part.count("torch.cuda.") for part in parts)
    assert sum(f.rewritten for f in ported.findings) >= expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('"""Doc."""\nfrom __future__ import annotations\nimport torch\n\n\nx = 1\n' + CUDA_LINE,
         '"""Doc."""\nfrom __future__ import annotations\nimport torch\nfrom accel import get_accelerator\n\n\nx = 1\n' + PORTED_LINE),
        (CUDA_LINE, "from accel import get_accelerator\n" + PORTED_LINE),
        ("#!/usr/bin/env python\n# header\nimport torch\n" + CUDA_LINE,
         "#!/usr/bin/env python\n# header\nimport torch\nfrom accel import get_accelerator\n" + PORTED_LINE),
        ("import torch\r\n" + CUDA_LINE.replace("\n", "\r\n"),
         "import torch\r\nfrom accel import get_accelerator\r\n" + PORTED_LINE.replace("\n", "\r\n")),
        ("import torch\n" + CUDA_LINE.rstrip("\n"),
         "import torch\nfrom accel import get_accelerator\n" + PORTED_LINE.rstrip("\n")),
        # The import used to go after this line, below the use it is needed by.
        ("import torch; import os; " + CUDA_LINE,
         "from accel import get_accelerator\nimport torch; import os; " + PORTED_LINE),
        ("import torch; import os\n" + CUDA_LINE,
         "import torch; import os\nfrom accel import get_accelerator\n" + PORTED_LINE),
        # Old Mac line ends (used to get a stray LF).
        ("import torch\r" + CUDA_LINE.replace("\n", "\r"),
         "import torch\rfrom accel import get_accelerator\r" + PORTED_LINE.replace("\n", "\r")),
        # No leading import: the import went above the "#!" and coding lines (the file no
        # longer decoded, and ran under the shell).
        ("#!/usr/bin/env python\n# -*- coding: latin-1 -*-\n\ntry:\n    import torch\nexcept ImportError:\n    pass\n" + CUDA_LINE,
         "#!/usr/bin/env python\n# -*- coding: latin-1 -*-\n\nfrom accel import get_accelerator\ntry:\n    import torch\nexcept ImportError:\n    pass\n" + PORTED_LINE),
    ],
    ids=["docstring-future-imports", "no-imports", "comment-header", "crlf", "no-final-newline",
         "semicolon-joined-use", "semicolon-joined-imports", "cr-only", "shebang-coding-no-import"],
)  # fmt: skip
def test_the_import_goes_below_the_leading_imports(source: str, expected: str) -> None:
    assert port_source(source).source == expected


@pytest.mark.parametrize(
    ("source", "error", "message"),
    [
        ("x = " + "(" * 1500 + CUDA_LINE.strip() + ")" * 1500 + "\n", SourceError, "too many nested parentheses"),
        ("def f():\n" + "".join("    " * i + "if x:\n" for i in range(1, 120)) + "    " * 120 + CUDA_LINE, SourceError, "too many levels of indentation"),
        ("x = " + "a" + ".b" * 20_000 + ".cuda\n", PortError, "line 1: a logical line of 40006 tokens is more than the rewriter parses safely (8000)"),
        ("x = " + " + ".join(["a"] * 19_999 + ["torch.cuda.f()"]) + "\n", PortError, "line 1: a logical line of 40008 tokens"),
        # Nesting no bracket marks: the lambdas crashed the interpreter, the unary operators
        # took 25 s and 3.4 GB before being refused.
        ("x = " + "lambda: " * 3500 + CUDA_LINE, PortError, "line 1: an expression nests deeper than Python's own parser accepts"),
        ("x = " + "not " * 7900 + CUDA_LINE, PortError, "line 1: an expression nests deeper than Python's own parser accepts"),
        ("import torch\nx = " + "-" * 3000 + CUDA_LINE, PortError, "line 2: an expression nests 3003 levels deep, more than the rewriter parses safely (500)"),
    ],
    ids=["1500-deep-brackets", "120-deep-blocks", "20000-long-attribute-chain", "20000-term-sum",
         "3500-nested-lambdas", "7900-unary-nots", "3000-unary-minuses"],
)  # fmt: skip
def test_input_that_crashed_the_parser_is_refused_with_its_line(
    source: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        port_source(source)


@pytest.mark.parametrize(
    "source",
    [
        "x = " + "(" * 199 + CUDA_LINE.strip() + ")" * 199 + "\n",
        "x = " + " + ".join(["torch.cuda.memory_allocated()"] * 400) + "\n",
        "x = " + " + ".join(["a"] * 3000 + ["torch.cuda.memory_allocated()"]) + "\n",
        "x = " + "lambda: " * 450 + CUDA_LINE,
    ],
    ids=["199-deep", "400-term-sum", "3000-term-sum", "450-nested-lambdas"],
)
def test_deep_but_legal_code_is_ported(source: str) -> None:
    result = port_source(source)
    assert "torch.cuda" not in result.source
    assert result.changed


def _write(directory: Path, name: str, data: bytes | str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def test_a_bad_file_is_named_and_the_others_are_still_ported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = {
        "a_syntax.py": "def f(:\n    torch.cuda.synchronize()\n",
        "b_bytes.py": b"x = '\xff\xfe'\n" + CUDA_LINE.encode(),
        "c_deep.py": "x = " + "(" * 1500 + "torch.cuda.f()" + ")" * 1500 + "\n",
        "d_long.py": "x = a" + ".b" * 20_000 + ".cuda\n",
        "e_lambdas.py": "x = " + "lambda: " * 3500 + CUDA_LINE,
    }
    for name, data in bad.items():
        _write(tmp_path, name, data)
    good = _write(tmp_path, "z_good.py", "import torch\n" + CUDA_LINE)
    assert main(["port", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    for name in bad:
        assert f"{tmp_path / name}: cannot be ported: " in err, err
    assert "cannot decode it" in err
    assert PORTED_LINE in good.read_text()


def test_a_full_disk_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    # ulimit -f 64: writing more than 64 KiB fails (EFBIG); the file must stay whole.
    text = "import torch\n" + "".join(
        f"x{i} = torch.cuda.memory_allocated()  # padding\n" for i in range(3000)
    )
    big = _write(tmp_path, "big.py", text)
    small = _write(tmp_path, "small.py", "import torch\n" + CUDA_LINE)
    code = textwrap.dedent(
        f"""
        import resource, sys
        from accel.cli import main
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
        sys.exit(main(["port", {str(big)!r}, {str(small)!r}]))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 2, result.stderr
    assert f"{big}: cannot be written (File too large); left unchanged" in result.stderr
    assert big.read_text() == text  # not truncated
    assert PORTED_LINE in small.read_text()  # the next file was still ported
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.py", "small.py"]  # no temp file


def test_line_endings_bom_and_declared_encodings_are_kept(tmp_path: Path) -> None:
    crlf = _write(tmp_path, "crlf.py", b"import torch\r\ntorch.cuda.synchronize()\r\n")
    bom = _write(tmp_path, "bom.py", b"\xef\xbb\xbfimport torch\ntorch.cuda.synchronize()\n")
    latin = _write(
        tmp_path,
        "latin.py",
        "# -*- coding: latin-1 -*-\nname = 'café'\ntorch.cuda.synchronize()\n".encode("latin-1"),
    )
    assert main(["port", str(tmp_path)]) == 0
    assert (
        crlf.read_bytes()
        == b"import torch\r\nfrom accel import get_accelerator\r\nget_accelerator().synchronize()\r\n"
    )
    assert bom.read_bytes().startswith(b"\xef\xbb\xbfimport torch\nfrom accel import")
    assert latin.read_bytes().decode("latin-1").count("café") == 1
    assert b"get_accelerator().synchronize()" in latin.read_bytes()


def test_read_only_files_and_modes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = _write(tmp_path, "locked.py", "import torch\n" + CUDA_LINE)
    script = _write(tmp_path, "script.py", "import torch\n" + CUDA_LINE)
    locked.chmod(0o444)
    script.chmod(0o750)
    try:
        assert main(["port", str(tmp_path)]) == 2
        assert f"{locked}: is read-only; left unchanged" in capsys.readouterr().err
        assert CUDA_LINE in locked.read_text()
        assert PORTED_LINE in script.read_text()
        assert stat.S_IMODE(script.stat().st_mode) == 0o750  # the rename kept the mode
    finally:
        locked.chmod(0o644)


def test_symlinks_are_not_followed_out_of_the_tree_or_around_a_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    target = _write(outside, "elsewhere.py", "import torch\n" + CUDA_LINE)
    (tree / "link.py").symlink_to(target)
    (tree / "loop").symlink_to(tree)
    own = _write(tree, "own.py", "import torch\n" + CUDA_LINE)
    started = time.perf_counter()
    # Reported, not an error: a tree with a link in it could never pass --check (exit 2).
    assert main(["port", str(tree)]) == 0
    assert time.perf_counter() - started < 30
    err = capsys.readouterr().err
    assert f"{tree / 'link.py'}: symbolic link not followed" in err
    assert f"{tree / 'loop'}: symbolic link not followed" in err
    assert CUDA_LINE in target.read_text()  # outside the tree: untouched
    assert PORTED_LINE in own.read_text()
    assert main(["port", "--check", str(tree)]) == 0


def test_a_walk_leaves_virtual_environments_and_hidden_directories_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It rewrote third-party code under .venv/lib/python3.11/site-packages.
    installed = [
        _write(tmp_path / ".venv" / "lib" / "site-packages" / "pkg", "ops.py", CUDA_LINE),
        _write(tmp_path / "env" / "lib" / "site-packages" / "pkg", "ops.py", CUDA_LINE),
        _write(tmp_path / "src" / "vendor" / "site-packages", "ops.py", CUDA_LINE),
        _write(tmp_path / ".git" / "hooks", "hook.py", CUDA_LINE),
    ]
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    own = _write(tmp_path / "src", "train.py", "import torch\n" + CUDA_LINE)
    assert main(["port", str(tmp_path)]) == 0
    assert PORTED_LINE in own.read_text()
    assert all(path.read_text() == CUDA_LINE for path in installed)
    err = capsys.readouterr().err
    assert f"{tmp_path / '.venv'}: hidden directory not walked" in err
    assert f"{tmp_path / '.git'}: hidden directory not walked" in err
    assert f"{tmp_path / 'env'}: virtual environment not walked" in err
    assert f"{tmp_path / 'src/vendor/site-packages'}: installed packages not walked" in err


@pytest.mark.parametrize(
    "layout",
    [
        "if torch.cuda.is_available():\n    d = 'cuda'\n\n# the CPU\nelse:\n    d = 'cpu'\n",
        "try:\n    d = 'cuda:0'\nexcept ImportError:\n    d = 'cpu'\nelse:\n    pass\nfinally:\n    pass\n",
        "for i in range(2):\n    d = 'cuda'\nelse:\n    torch.cuda.synchronize()\n",
        "while False:\n    pass\n\nelse:\n    d = 'cuda'\n",
        "if False:\n    d = 'cpu'\nelif torch.cuda.is_available():\n    d = 'cuda'\nelse:\n    d = 'cpu'\n",
    ],
    ids=["if-else-comment", "try-except-else-finally", "for-else", "while-else", "if-elif-else"],
)
def test_module_level_compound_statements_stay_whole(layout: str) -> None:
    # The splitter cut `else:` (and every later clause) from its statement at module level,
    # and the whole file was refused as a syntax error.
    source = "import torch\n" + layout + "x = torch.ones(1).to(d)\n"
    result = port_source(source)
    assert result.changed
    compile(result.source, "ported.py", "exec")  # still one valid module


@pytest.mark.parametrize("separator", ["\x0c", "\u2028", "\x85", "\x1c"])
def test_characters_str_splitlines_takes_for_line_ends_are_not_line_ends(
    tmp_path: Path, separator: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Python's tokenizer does not end lines there; str.splitlines does, which refused
    # valid files as syntax errors and shifted --check's line numbers.
    source = f"import torch\nname = 'a{separator}b'\n{CUDA_LINE}"
    compile(source, "valid.py", "exec")
    assert port_source(source).source == (
        f"import torch\nfrom accel import get_accelerator\nname = 'a{separator}b'\n{PORTED_LINE}"
    )
    path = _write(tmp_path, "valid.py", source)
    assert main(["port", "--check", str(path)]) == 1
    assert f"{path}:3:1:" in capsys.readouterr().out


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_the_owner_group_and_mode_are_kept(tmp_path: Path) -> None:
    # Root porting another user's 0640 file used to leave it root's.
    path = _write(tmp_path, "theirs.py", "import torch\n" + CUDA_LINE)
    os.chown(path, 1234, 5678)
    path.chmod(0o640)
    assert main(["port", str(path)]) == 0
    status = path.stat()
    assert (status.st_uid, status.st_gid, status.st_mode & 0o7777) == (1234, 5678, 0o640)
    assert PORTED_LINE in path.read_text()


def test_a_file_with_several_hard_links_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A replace gives the path a new file: the other links kept the old text unnoticed.
    path = _write(tmp_path, "linked.py", "import torch\n" + CUDA_LINE)
    os.link(path, tmp_path / "other_name.py")
    assert main(["port", str(path)]) == 2
    assert "has 2 hard links; left unchanged" in capsys.readouterr().err
    assert (
        path.read_text() == (tmp_path / "other_name.py").read_text() == "import torch\n" + CUDA_LINE
    )


@pytest.mark.parametrize(
    ("source", "message"),
    [
        # A syntax error in a statement no rule looks at: the file was "ported" (exit 0),
        # the statements around it rewritten, with the import under an alias.
        ("import torch\nx = = 1\n" + CUDA_LINE, "line 2: invalid syntax"),
        ('import torch\nprint "hello"\n' + CUDA_LINE, "line 2: Missing parentheses"),
        ("import torch\nif True:\n\tx = 1\n        " + CUDA_LINE,
         "line 4: inconsistent use of tabs and spaces"),
        # Lines the tokenizer gave: the end of the file, past it, or the next statement.
        ("import torch\n\n\ndef f():\n    x = 1\n    y = (2,\n    " + CUDA_LINE + "    return x +* y\n",
         "line 6: '(' was never closed"),
        ("import torch\n\n\ndef f(:\n    " + CUDA_LINE, "line 4: invalid syntax"),
        # Python refuses to compile a null byte (3.11: a ValueError, not a SyntaxError).
        ("import torch\nx = 1\0\n" + CUDA_LINE, "line 2: source code cannot contain null bytes"),
    ],
    ids=["assignment", "python2-print", "tabs-and-spaces", "unclosed-bracket", "bad-signature",
         "null-byte"],
)  # fmt: skip
def test_a_file_python_cannot_parse_is_refused_at_pythons_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, message: str
) -> None:
    path = _write(tmp_path, "broken.py", source)
    assert main(["port", str(path)]) == 2
    assert path.read_text() == source
    assert f"{path}: cannot be ported: {message}" in capsys.readouterr().err


def test_syntax_newer_than_the_running_python_is_still_ported() -> None:
    # Refused as a syntax error under Python 3.11 once files that do not parse were refused
    # whole; libcst reads the newer grammar, so only what neither parses is refused.
    source = (
        "import torch\ntype Index = int\ndef first[T](items: list[T]) -> T:\n    return items[0]\n"
        + CUDA_LINE
    )
    ported = port_source(source).source
    # Under an alias where this Python cannot analyse the module (local rules only).
    assert ported.endswith(("\n" + PORTED_LINE, "\n_accel_" + PORTED_LINE))
    assert "type Index = int\n" in ported


def test_an_empty_path_is_refused_not_the_current_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `accel port "$SRC"` with SRC unset: Path("") is ".", and every file under it was ported.
    victim = _write(tmp_path, "victim.py", "import torch\n" + CUDA_LINE)
    monkeypatch.chdir(tmp_path)
    assert main(["port", ""]) == 2
    assert victim.read_text() == "import torch\n" + CUDA_LINE
    assert "'': empty path" in capsys.readouterr().err


def test_a_walk_passes_fifos_and_directories_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A FIFO named *.py blocked the walk for ever; one directory whose pyvenv.cfg could not
    # be looked at (no search permission) stopped the whole run, porting nothing.
    os.mkfifo(tmp_path / "pipe.py")
    locked = tmp_path / "locked"
    locked.mkdir()
    ported = _write(tmp_path, "train.py", "import torch\n" + CUDA_LINE)
    is_file = Path.is_file

    def no_search_permission(path: Path) -> bool:
        if path.parent == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return is_file(path)

    monkeypatch.setattr(Path, "is_file", no_search_permission)
    unlistable = tmp_path / "unlistable"
    unlistable.mkdir()
    scandir = os.scandir

    def no_read_permission(path: Any) -> Any:
        if Path(path) == unlistable:
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", no_read_permission)
    # Were the FIFO read, this writer would end the read (and the test would fail, not hang).
    unblock = threading.Timer(10, lambda: os.close(os.open(tmp_path / "pipe.py", os.O_WRONLY)))
    unblock.start()
    try:
        assert main(["port", str(tmp_path)]) == 2  # a directory it could not read
    finally:
        unblock.cancel()
    assert "get_accelerator" in ported.read_text()
    said = capsys.readouterr().err
    assert f"{tmp_path / 'pipe.py'}: not a regular file, not read" in said
    assert f"{unlistable}: cannot be read: Permission denied" in said


def test_files_ported_in_place_are_all_ported_when_the_reader_goes_away(tmp_path: Path) -> None:
    # `accel port many/ | head -1`: the broken pipe stopped the run after the first files.
    for index in range(40):
        _write(tmp_path, f"f{index}.py", "import torch\n" + CUDA_LINE)
    reader, writer = os.pipe()
    os.close(reader)
    with os.fdopen(writer, "w") as closed:
        result = subprocess.run(
            [sys.executable, "-m", "accel", "port", str(tmp_path)], stdout=closed,
            stderr=subprocess.PIPE, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert result.stderr == ""
    assert all("get_accelerator" in path.read_text() for path in tmp_path.glob("*.py"))
