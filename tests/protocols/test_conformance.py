"""Every available backend (CPU here; CUDA and plugins where present) passes every kit check.

The checks live in ``accel.testing`` so third-party backends run exactly the same ones;
this file only parametrises them, one pytest item per (backend, check).
"""

from __future__ import annotations

import pytest

from accel.protocols import (
    Accelerator,
    supports_graphs,
    supports_op_builders,
    supports_profiler,
    supports_streams,
)
from accel.testing import CHECKS, CORE, OPTIONAL, Check, run_check
from accel.testing.checks.generic import members_are_real, no_partial_capabilities
from tests.conftest import require


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: f"{c.protocol.__name__}-{c.name}")
def test_backend_passes_check(accelerator: Accelerator, check: Check) -> None:
    require(accelerator, check.protocol)
    violation = run_check(accelerator, check)
    assert violation is None, str(violation)


@pytest.mark.parametrize("protocol", [*CORE, *OPTIONAL], ids=lambda p: p.__name__)
def test_capability_is_whole_or_absent(accelerator: Accelerator, protocol: type) -> None:
    if isinstance(accelerator, protocol):
        members_are_real(accelerator, protocol)
    else:
        no_partial_capabilities(accelerator, protocol)


def test_supports_helpers_agree_with_isinstance(accelerator: Accelerator) -> None:
    from accel.protocols import GraphAPI, OpBuilderAPI, ProfilerAPI, StreamAPI

    assert supports_streams(accelerator) is isinstance(accelerator, StreamAPI)
    assert supports_graphs(accelerator) is isinstance(accelerator, GraphAPI)
    assert supports_profiler(accelerator) is isinstance(accelerator, ProfilerAPI)
    assert supports_op_builders(accelerator) is isinstance(accelerator, OpBuilderAPI)
