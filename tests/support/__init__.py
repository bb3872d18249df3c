"""What the tests share: fakes, the fake PrivateUse1 device, broken backends, strategies."""

from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root."""
TESTS = ROOT / "tests"


class Installer(Protocol):
    """The ``install`` fixture (tests/conftest.py): distribution name, entry points (name ->
    target) of ``group``, modules (name -> source)."""

    def __call__(
        self,
        distribution: str,
        entries: dict[str, str],
        modules: dict[str, str],
        group: str = "accel.backends",
    ) -> None: ...
