"""Static typing: capability checks narrow, missing capabilities are static errors.

Runs mypy --strict and basedpyright (strict) on tests/typing/: every file under pass/
must be clean, and under fail/ each checker must report exactly the lines marked
``# expect-error``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT, TESTS
from tests.support.once import once_per_session

pytestmark = pytest.mark.slow

TYPING = TESTS / "typing"
FAIL_FILES = sorted((TYPING / "fail").glob("*.py"))


def _expected_lines(path: Path) -> set[int]:
    lines = path.read_text().splitlines()
    return {number for number, line in enumerate(lines, 1) if "# expect-error" in line}


def _run_mypy() -> str:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(TYPING / "pass"), *map(str, FAIL_FILES)],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr  # 1: errors found; 2: mypy failed
    return result.stdout


@pytest.fixture(scope="session")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    """mypy --strict over every typing file at once: one run serves every test here, also
    across pytest-xdist's workers, which share the base of tmp_path_factory; each test
    reads the lines of its own files. mypy's own cache (.mypy_cache, as `mypy --strict`
    leaves it) makes the run take a second instead of half a minute of reading torch."""
    output: str = once_per_session(tmp_path_factory, "mypy", lambda _: _run_mypy())
    return output


def _mypy_error_lines(output: str, path: Path) -> set[int]:
    pattern = re.compile(rf"^{re.escape(str(path.relative_to(ROOT)))}:(\d+): error:", re.M)
    return {int(m) for m in pattern.findall(output)}


def _basedpyright(*paths: Path) -> dict[str, object]:
    executable = shutil.which("basedpyright", path=str(Path(sys.executable).parent))
    if executable is None:
        pytest.fail("basedpyright is not installed in this environment (pip install -e '.[test]')")
    result = subprocess.run(
        [executable, "--outputjson", *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    report: dict[str, object] = json.loads(result.stdout)
    return report


def _pyright_error_lines(report: dict[str, object], path: Path) -> set[int]:
    diagnostics = report["generalDiagnostics"]
    assert isinstance(diagnostics, list)
    return {
        int(d["range"]["start"]["line"]) + 1
        for d in diagnostics
        if d["severity"] == "error" and Path(d["file"]).resolve() == path.resolve()
    }


def test_pass_files_are_clean_under_mypy_strict(mypy_output: str) -> None:
    errors = {p.name: _mypy_error_lines(mypy_output, p) for p in (TYPING / "pass").glob("*.py")}
    assert all(not lines for lines in errors.values()), mypy_output


def test_pass_files_are_clean_under_basedpyright() -> None:
    report = _basedpyright(TYPING / "pass")
    assert report["generalDiagnostics"] == []


@pytest.mark.parametrize("path", FAIL_FILES, ids=lambda p: p.name)
def test_mypy_reports_exactly_the_marked_lines(path: Path, mypy_output: str) -> None:
    assert _mypy_error_lines(mypy_output, path) == _expected_lines(path), mypy_output


@pytest.mark.parametrize("path", FAIL_FILES, ids=lambda p: p.name)
def test_basedpyright_reports_exactly_the_marked_lines(path: Path) -> None:
    report = _basedpyright(path)
    assert _pyright_error_lines(report, path) == _expected_lines(path), report
