"""Optional capabilities: a backend either provides one for real or is rejected by isinstance."""

from __future__ import annotations

import inspect

import pytest

from accel.protocols import (
    Accelerator,
    GraphAPI,
    OpBuilderAPI,
    ProfilerAPI,
    StreamAPI,
    supports_graphs,
    supports_op_builders,
    supports_profiler,
    supports_streams,
)
from tests.conftest import require

CAPABILITIES = [
    (StreamAPI, supports_streams),
    (GraphAPI, supports_graphs),
    (ProfilerAPI, supports_profiler),
    (OpBuilderAPI, supports_op_builders),
]


@pytest.mark.parametrize(("capability", "helper"), CAPABILITIES, ids=lambda c: c.__name__)
def test_helpers_agree_with_isinstance(
    accelerator: Accelerator, capability: type, helper: object
) -> None:
    assert callable(helper)
    assert helper(accelerator) is isinstance(accelerator, capability)


@pytest.mark.parametrize("capability", [c for c, _ in CAPABILITIES], ids=lambda c: c.__name__)
def test_absent_capability_has_no_callable_members(
    accelerator: Accelerator, capability: type
) -> None:
    # "No silent no-ops": a backend that lacks a capability must not offer callables for it
    # that would do nothing. Every member is either missing or a None marker.
    if isinstance(accelerator, capability):
        pytest.skip(f"{type(accelerator).__name__} provides {capability.__name__}")
    for member in capability.__protocol_attrs__:  # type: ignore[attr-defined]
        assert not callable(inspect.getattr_static(accelerator, member, None)), member


def test_profiler_ranges_nest_and_unbalanced_pop_fails(accelerator: Accelerator) -> None:
    require(accelerator, ProfilerAPI)
    assert isinstance(accelerator, ProfilerAPI)
    accelerator.range_push("outer")
    accelerator.range_push("inner")
    accelerator.range_pop()
    accelerator.range_pop()
    with pytest.raises(RuntimeError, match="no open range"):
        accelerator.range_pop()
    with pytest.raises(TypeError, match="msg"):
        accelerator.range_push(3)  # type: ignore[arg-type]
