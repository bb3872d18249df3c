"""The backends of tests/typing/pass loaded as modules, the frozen first-release one
(first_release_backend.py) among them: the contract, kit and port tests run code against
them."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.support import TESTS

FROZEN = TESTS / "typing" / "pass" / "first_release_backend.py"


def first_release_module() -> ModuleType:
    """A fresh copy of the frozen backend's module (``BoardAccelerator`` and its kin)."""
    return typed_module(FROZEN.stem)


def typed_module(stem: str) -> ModuleType:
    """A fresh copy of the module ``tests/typing/pass/<stem>.py``, which CI type-checks."""
    spec = importlib.util.spec_from_file_location(stem, FROZEN.with_name(f"{stem}.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
