"""The frozen first-release backend (tests/typing/pass/first_release_backend.py), loaded
as a module: the contract tests and the port tests run code against it."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.support import TESTS

FROZEN = TESTS / "typing" / "pass" / "first_release_backend.py"


def first_release_module() -> ModuleType:
    """A fresh copy of the frozen backend's module (``BoardAccelerator`` and its kin)."""
    spec = importlib.util.spec_from_file_location("first_release_backend", FROZEN)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
