"""What the tests share: fakes, the fake PrivateUse1 device, broken backends, strategies."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root."""
TESTS = ROOT / "tests"
