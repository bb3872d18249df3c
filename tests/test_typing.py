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

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TYPING = ROOT / "tests" / "typing"
FAIL_FILES = sorted((TYPING / "fail").glob("*.py"))


def _expected_lines(path: Path) -> set[int]:
    lines = path.read_text().splitlines()
    return {number for number, line in enumerate(lines, 1) if "# expect-error" in line}


def _mypy(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


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


def test_pass_files_are_clean_under_mypy_strict() -> None:
    result = _mypy(TYPING / "pass")
    assert result.returncode == 0, result.stdout


def test_pass_files_are_clean_under_basedpyright() -> None:
    report = _basedpyright(TYPING / "pass")
    assert report["generalDiagnostics"] == []


@pytest.mark.parametrize("path", FAIL_FILES, ids=lambda p: p.name)
def test_mypy_reports_exactly_the_marked_lines(path: Path) -> None:
    output = _mypy(path).stdout
    pattern = re.compile(rf"^{re.escape(str(path.relative_to(ROOT)))}:(\d+): error:", re.M)
    assert {int(m) for m in pattern.findall(output)} == _expected_lines(path), output


@pytest.mark.parametrize("path", FAIL_FILES, ids=lambda p: p.name)
def test_basedpyright_reports_exactly_the_marked_lines(path: Path) -> None:
    report = _basedpyright(path)
    assert _pyright_error_lines(report, path) == _expected_lines(path), report
