"""Fixtures for backends driven by stand-in device modules."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
import torch

from accel.mixins.graph import capture_graph_class


def _forget_device_modules() -> None:
    torch.get_device_module.cache_clear()
    capture_graph_class.cache_clear()  # a class made over one test's graph class


@pytest.fixture
def registered() -> Iterator[list[str]]:
    """Device types whose fake modules the test registers; removed from torch afterwards."""
    names: list[str] = []
    _forget_device_modules()
    yield names
    for name in names:
        delattr(torch, name)
        sys.modules.pop(f"torch.{name}", None)
    _forget_device_modules()
