"""Shared fixtures: every available backend runs the per-protocol conformance suites."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

import accel
from accel._registry import available_backends
from accel.protocols import Accelerator

pytest_plugins = ["pytester"]

# The machine is shared and noisy: no per-example deadline; a moderate example count keeps
# the whole suite within minutes.
settings.register_profile(
    "accel",
    deadline=None,
    max_examples=int(os.environ.get("ACCEL_HYPOTHESIS_EXAMPLES", "40")),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("accel")


AVAILABLE_BACKENDS: list[Accelerator] = [backend() for backend in available_backends()]


@pytest.fixture(
    scope="session",
    params=AVAILABLE_BACKENDS,
    ids=[getattr(type(b), "name", type(b).__name__) for b in AVAILABLE_BACKENDS],
)
def accelerator(request: pytest.FixtureRequest) -> Accelerator:
    """One instance of each available backend; conformance tests run once per backend."""
    backend: Accelerator = request.param
    return backend


def require(accelerator: object, capability: type) -> None:
    """Skip the calling test when ``accelerator`` lacks the optional ``capability``."""
    if not isinstance(accelerator, capability):
        pytest.skip(f"{type(accelerator).__name__} does not provide {capability.__name__}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the `gpu` group cleanly on machines without a CUDA GPU."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none is visible to torch)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fresh_selection() -> Iterator[None]:
    """Forget the process's accelerator before and after a selection test."""
    accel.reset_accelerator()
    yield
    accel.reset_accelerator()
