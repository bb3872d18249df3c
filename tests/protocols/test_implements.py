"""Contracts are written once, in the protocol, and ``help()``/``inspect.getdoc`` show them on
every implementation (``accel.protocols._contract.implements``)."""

from __future__ import annotations

import inspect
import types

import pytest
from typing_extensions import Protocol, get_protocol_members, runtime_checkable

import accel.mixins
from accel.backends.cpu import CPUAccelerator
from accel.backends.cuda import CUDAAccelerator
from accel.backends.devices import XPUAccelerator
from accel.backends.mps import MPSAccelerator
from accel.ops.prebuilt import PrebuiltOpBuilder
from accel.protocols import CAPABILITIES, OpBuilder, implements

MIXINS = [
    getattr(accel.mixins, name)
    for name in accel.mixins.__all__
    if isinstance(getattr(accel.mixins, name), type)
]
IMPLEMENTATIONS = [CPUAccelerator, CUDAAccelerator, MPSAccelerator, XPUAccelerator, *MIXINS]


def _contract(protocol: type, name: str) -> str:
    docstring = inspect.getdoc(getattr(protocol, name))
    assert docstring
    return docstring


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda cls: cls.__name__)
def test_every_implemented_member_shows_its_protocol_contract(cls: type) -> None:
    shown = 0
    for protocol in CAPABILITIES:
        for name in sorted(get_protocol_members(protocol)):
            if not isinstance(inspect.getattr_static(cls, name, None), types.FunctionType):
                continue  # not implemented here, or declared absent by a No-mixin
            assert _contract(protocol, name) in (inspect.getdoc(getattr(cls, name)) or ""), (
                f"{cls.__name__}.{name}"
            )
            shown += 1
    assert shown or cls.__name__.startswith("No"), f"{cls.__name__} implements nothing"


def test_op_builders_show_the_op_builder_contract() -> None:
    for name in ("name", "is_compatible", "load"):
        assert _contract(OpBuilder, name) in (
            inspect.getdoc(getattr(PrebuiltOpBuilder, name)) or ""
        )


def test_the_implementation_note_comes_first_and_the_contract_once() -> None:
    @runtime_checkable
    class SizeAPI(Protocol):
        def size(self) -> int:
            """The size.

            Returns:
                Bytes.
            """
            ...

        def count(self) -> int:
            """How many."""
            ...

    class Host:
        def size(self) -> int:
            """0: the host has none."""
            return 0

        def count(self) -> int:
            return 1

    decorated = implements(SizeAPI)(Host)
    assert decorated is Host
    assert (
        inspect.getdoc(Host.size)
        == "0: the host has none.\n\nSizeAPI.size: The size.\n\nReturns:\n    Bytes."
    )
    assert inspect.getdoc(Host.count) == "SizeAPI.count: How many."
    implements(SizeAPI)(Host)  # a second class sharing the functions adds nothing
    assert inspect.getdoc(Host.count) == "SizeAPI.count: How many."
    assert isinstance(Host(), SizeAPI)  # capability checks are untouched


def test_implements_refuses_what_is_not_a_protocol_and_stale_declarations() -> None:
    class NotAProtocol:
        def size(self) -> int:
            return 0

    with pytest.raises(
        TypeError, match=r"implements\(\) takes protocol classes, got .*NotAProtocol"
    ):
        implements(NotAProtocol)

    class CountAPI(Protocol):
        def count(self) -> int: ...

    class Sized:
        def size(self) -> int:
            return 0

    with pytest.raises(TypeError, match="Sized defines no member of CountAPI"):
        implements(CountAPI)(Sized)
