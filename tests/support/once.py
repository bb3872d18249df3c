"""A job that several tests read, run once per pytest session (not once per xdist worker)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock


def once_per_session(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Any]
) -> Any:
    """``make(directory)``'s JSON-able result, made by the first test of the session that
    asks for ``name``; any later one, in this or another xdist worker, reads it back.

    The workers' temporary directories share a parent (pytest-xdist's basetemp layout;
    without xdist, the session's own directory is used, never an earlier session's): a
    lock file there makes the others wait while the first one makes it. A ``make`` that
    raises leaves nothing behind, so the next asker tries again (and fails as loudly).
    """
    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent
        # Remote workers share no per-session directory: the run's id keeps sessions apart.
        name = f"{name}-{os.environ.get('PYTEST_XDIST_TESTRUNUID', '')}"
    made = root / f"once-{name}.json"
    with FileLock(root / f"once-{name}.lock"):
        if made.exists():
            return json.loads(made.read_text())
        directory = root / f"once-{name}"
        directory.mkdir(exist_ok=True)
        writing = made.with_suffix(".partial")
        writing.write_text(json.dumps(make(directory)))
        writing.replace(made)  # whole or not there: a worker killed mid-write leaves none
        return json.loads(made.read_text())  # every asker gets the same JSON's values
