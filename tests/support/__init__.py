"""What the tests share: fakes, the fake PrivateUse1 device, broken backends, strategies."""

from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root."""
TESTS = ROOT / "tests"

Installer = Callable[[str, dict[str, str], dict[str, str]], None]
"""The ``install`` fixture (tests/conftest.py): distribution name, entry points, modules."""
