"""Shared fixtures: every available backend runs the per-protocol conformance suites."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

import accel
from accel._selection import backend_names, load_backend
from accel.protocols import Accelerator

# The machine is shared and noisy: no per-example deadline; a moderate example count keeps
# the whole suite within minutes.
settings.register_profile(
    "accel",
    deadline=None,
    max_examples=int(os.environ.get("ACCEL_HYPOTHESIS_EXAMPLES", "40")),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("accel")


def _available_backends() -> list[Accelerator]:
    backends: list[Accelerator] = []
    for name in backend_names():
        instance = load_backend(name)()
        if instance.is_available():
            backends.append(instance)
    return backends


AVAILABLE_BACKENDS = _available_backends()


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


@pytest.fixture
def fresh_selection() -> Iterator[None]:
    """Forget the process's accelerator before and after a selection test."""
    accel.reset_accelerator()
    yield
    accel.reset_accelerator()
