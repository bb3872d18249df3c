"""The memoised isinstance of capability protocols answers exactly like typing does."""

from __future__ import annotations

import gc
import weakref

import pytest
from typing_extensions import Protocol, runtime_checkable

from accel.protocols import Accelerator, GraphAccelerator, GraphAPI
from accel.protocols._fast import fast_protocol
from accel.protocols._unsupported import unsupported


@fast_protocol
@runtime_checkable
class Quacks(Protocol):
    def quack(self) -> str: ...


@runtime_checkable
class SlowQuacks(Protocol):
    def quack(self) -> str: ...


class Duck:
    def quack(self) -> str:
        return "quack"


class Mute:
    quack = None


class SubDuck(Duck):
    pass


@pytest.mark.parametrize("obj", [Duck(), Mute(), SubDuck(), 3, "s", None, Duck])
def test_answers_match_the_unmemoised_protocol(obj: object) -> None:
    for _ in range(2):  # first call computes, second reads the memo
        assert isinstance(obj, Quacks) is isinstance(obj, SlowQuacks)


def test_none_marker_rejects_the_class() -> None:
    assert not isinstance(Mute(), Quacks)


def test_memo_does_not_keep_classes_alive() -> None:
    def make() -> weakref.ref[type]:
        cls = type("Temporary", (), {"quack": lambda self: "q"})
        assert isinstance(cls(), Quacks)
        return weakref.ref(cls)

    ref = make()
    gc.collect()
    assert ref() is None
    # A new class that may reuse the id gets its own answer.
    assert not isinstance(type("Other", (), {})(), Quacks)


def test_derived_protocols_keep_their_own_answers() -> None:
    @runtime_checkable
    class QuacksAndWalks(Quacks, Protocol):
        def walk(self) -> None: ...

    assert isinstance(Duck(), Quacks)
    assert not isinstance(Duck(), QuacksAndWalks)
    assert isinstance(Duck(), Quacks)


def test_intersections_need_every_part() -> None:
    assert not isinstance(Duck(), Accelerator)
    assert not isinstance(Duck(), GraphAPI)
    assert not isinstance(Duck(), GraphAccelerator)


def test_registration_invalidates_memos() -> None:
    class Stranger:
        pass

    assert not isinstance(Stranger(), Quacks)
    Quacks.register(Stranger)
    assert isinstance(Stranger(), Quacks)


def test_only_runtime_protocols_can_be_made_fast() -> None:
    class NotRuntime(Protocol):
        def f(self) -> None: ...

    with pytest.raises(TypeError, match="runtime_checkable"):
        fast_protocol(NotRuntime)


class Muted:
    quack: None = unsupported("Quacks", "supports_quacks", "it is a mime")


# Built with type(): a checker rightly rejects bases that disagree about quack.
MutedDuck = type("MutedDuck", (Muted, Duck), {})  # the marker comes first: it wins
DuckFirst = type("DuckFirst", (Duck, Muted), {})  # the implementation comes first: it wins


def test_an_unsupported_marker_rejects_the_class_as_none_does() -> None:
    for cls in (Muted, MutedDuck):
        assert not isinstance(cls(), Quacks)
        assert not issubclass(cls, Quacks)
        assert getattr(cls(), "quack", None) is None
    with pytest.raises(AttributeError, match=r"^Muted has no quack: .*\(it is a mime\)"):
        # A static error as well: checkers see the None annotation.
        Muted().quack()  # type: ignore[misc]  # pyright: ignore[reportOptionalCall]
    with pytest.raises(AttributeError, match=r"^MutedDuck has no quack: "):
        MutedDuck().quack()  # pyright: ignore[reportOptionalCall]
    assert isinstance(DuckFirst(), Quacks)
    assert issubclass(DuckFirst, Quacks)
