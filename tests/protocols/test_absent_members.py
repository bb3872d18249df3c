"""A capability a backend lacks is absent to every structural check, not only to accel's.

The CPU declares streams and graphs absent (``NoStreamMixin``, ``NoGraphMixin``): a
protocol written by a user, with ``typing`` or ``typing_extensions``, must not take it for
a streaming device, nor may ``hasattr``, ``dir`` or ``create_autospec``; reading the member
still raises ``CapabilityError`` with the check to make first.
"""

from __future__ import annotations

import inspect
import typing
from unittest import mock

import pytest
import torch
import typing_extensions

from accel.backends.cpu import CPUAccelerator
from accel.mixins import NoStreamMixin, TorchStreamMixin
from accel.protocols import CapabilityError, StreamAPI, supports_streams
from accel.protocols._unsupported import Absence, AbsentMembers


@typing.runtime_checkable
class TypingStreams(typing.Protocol):
    def Stream(self, device_index: int | None = None, priority: int = 0) -> torch.Stream: ...


@typing_extensions.runtime_checkable
class ExtensionStreams(typing_extensions.Protocol):
    def Stream(self, device_index: int | None = None, priority: int = 0) -> torch.Stream: ...


@typing_extensions.runtime_checkable
class ExtensionGraphs(typing_extensions.Protocol):
    def create_graph(self) -> object: ...


USER_PROTOCOLS = [TypingStreams, ExtensionStreams, ExtensionGraphs]


@pytest.mark.parametrize("protocol", USER_PROTOCOLS, ids=lambda p: p.__name__)
def test_a_users_protocol_does_not_take_the_cpu_for_a_streaming_device(protocol: type) -> None:
    assert not isinstance(CPUAccelerator(), protocol)
    assert not issubclass(CPUAccelerator, protocol)


def test_absent_members_are_not_attributes() -> None:
    acc = CPUAccelerator()
    for name in ("Stream", "Event", "stream", "current_stream", "default_stream", "set_stream",
                 "create_graph", "capture_to_graph", "replay_graph", "Graph"):  # fmt: skip
        assert not hasattr(acc, name), name
        assert name not in dir(acc), name
        assert getattr(acc, name, None) is None
        assert inspect.getattr_static(acc, name, None) is None, name


def test_an_autospec_of_the_cpu_has_no_stream() -> None:
    spec = mock.create_autospec(CPUAccelerator(), instance=True)
    assert not hasattr(spec, "Stream")
    with pytest.raises(AttributeError):
        spec.Stream()
    spec.device_count.return_value = 3  # present members are still spec'd
    assert spec.device_count() == 3


def test_reading_an_absent_member_names_the_protocol_and_the_check() -> None:
    acc = CPUAccelerator()
    with pytest.raises(CapabilityError) as caught:
        acc.Stream()  # type: ignore[misc]  # pyright: ignore[reportOptionalCall]
    assert str(caught.value) == (
        "CPUAccelerator has no Stream: it is not a StreamAPI (the backend has no streams or "
        "events; its work runs in call order, to completion on the CPU and on the device's "
        "one queue on MPS); check isinstance(acc, StreamAPI) or "
        "accel.protocols.supports_streams(acc) first"
    )
    assert isinstance(caught.value, AttributeError)
    with pytest.raises(CapabilityError, match=r"no set_stream: it is not a SetStreamAPI .*; "
                       r"check isinstance\(acc, SetStreamAPI\) first$"):  # fmt: skip
        acc.set_stream  # noqa: B018  # pyright: ignore[reportUnusedExpression]
    # Any other missing name is an ordinary AttributeError.
    with pytest.raises(AttributeError, match=r"^'CPUAccelerator' object has no attribute 'nope'$"):
        acc.nope  # type: ignore[attr-defined]  # noqa: B018  # pyright: ignore[reportAttributeAccessIssue]
    assert not isinstance(acc, StreamAPI)
    assert not supports_streams(acc)


class WithStreams(TorchStreamMixin):
    device_type = "cpu"


# The declaration comes first in the bases: it wins over the implementation after it.
SwitchedOff = type("SwitchedOff", (NoStreamMixin, WithStreams), {})
Implemented = type("Implemented", (WithStreams, NoStreamMixin), {})


def test_the_first_of_declaration_and_implementation_decides() -> None:
    assert not isinstance(SwitchedOff(), StreamAPI)
    with pytest.raises(CapabilityError, match=r"^SwitchedOff has no Stream: "):
        SwitchedOff().Stream  # noqa: B018
    assert not hasattr(SwitchedOff(), "Stream")
    assert "Stream" not in dir(SwitchedOff())
    assert isinstance(Implemented(), StreamAPI)
    assert callable(Implemented().Stream)
    assert "Stream" in dir(Implemented())
    for protocol in USER_PROTOCOLS[:2]:
        assert isinstance(Implemented(), protocol)


def test_an_absence_needs_the_none_annotation() -> None:
    with pytest.raises(TypeError, match=r"declares quack absent without a None annotation"):

        class Unannotated(AbsentMembers):  # pyright: ignore[reportUnusedClass]
            _accel_absent = (Absence("Quacks", "", "a mime", ("quack",)),)
