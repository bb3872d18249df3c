"""Constant-time ``isinstance`` for runtime-checkable capability protocols.

A runtime protocol check walks every member of the protocol on every call: 4-24 us with
``typing`` on Python 3.11 and about 5 us for a miss with ``typing_extensions``. Frameworks
ask "can this accelerator capture graphs?" on hot paths, so :func:`fast_protocol` memoises
the answer per concrete class and keeps the ``isinstance(acc, GraphAPI)`` spelling that
mypy and pyright narrow on. A hit or a miss then costs one dict lookup (~0.1 us).

The memo is keyed by ``type(obj)``: a capability is a property of the class (the design
puts capability markers at class level), not of one instance. Classes may be created and
dropped at run time (plugins, tests), so entries are keyed by ``id(cls)`` and removed by a
weak-reference callback when the class is collected: the memo never keeps a class alive
and an id is never reused while its entry exists.

One deliberate difference from typing: a member set to the descriptor that
:func:`accel.protocols._unsupported.unsupported` makes counts as ``None`` does, so
the No-mixins' markers can raise a clear error when read and still switch the
capability off (typing only knows ``None``).
"""

# The metaclass below derives from a base chosen at run time, so pyright cannot tell that
# its methods' first parameter is a class.
# pyright: reportSelfClsParameterName=false

from __future__ import annotations

import abc
import weakref
from typing import Any, TypeVar

from typing_extensions import get_protocol_members

from accel.protocols._unsupported import is_unsupported

_ProtocolT = TypeVar("_ProtocolT", bound=type)

# One memoising subclass per original protocol metaclass (typing's or typing_extensions').
_fast_metaclasses: dict[type, type] = {}
# Every memo ever created, so that a virtual registration can invalidate them all.
_all_memos: weakref.WeakSet[_Memo] = weakref.WeakSet()


class _Memo:
    """Answers of one protocol's instance checks, by id of the checked class."""

    __slots__ = ("__weakref__", "answers", "guards")

    def __init__(self) -> None:
        self.answers: dict[int, bool] = {}
        # Weak references whose callbacks drop an answer when its class is collected.
        self.guards: dict[int, weakref.ref[type]] = {}

    def remember(self, cls: type, answer: bool) -> None:
        key = id(cls)
        answers = self.answers

        def forget(_ref: weakref.ref[type], key: int = key) -> None:
            answers.pop(key, None)

        self.guards[key] = weakref.ref(cls, forget)
        answers[key] = answer

    def clear(self) -> None:
        self.answers.clear()
        self.guards.clear()


def static_member(obj: object, name: str) -> object:
    """``name`` as ``inspect.getattr_static`` finds it on an instance or an ordinary class
    (the instance's ``__dict__``, then the class's MRO; ``None`` if absent), without
    running descriptors, at a tenth of its cost: backend discovery and the first
    ``isinstance`` of each class look up every member of every protocol."""
    if not isinstance(obj, type):
        own: dict[str, object] | None = getattr(obj, "__dict__", None)
        if own is not None and name in own:
            return own[name]
    for klass in (obj if isinstance(obj, type) else type(obj)).__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _switched_off(protocol: type, obj: object) -> bool:
    """Whether one of ``protocol``'s members is an ``unsupported()`` marker on ``obj``
    (found the way typing finds a ``None`` marker)."""
    if not getattr(protocol, "_is_protocol", False):
        return False  # a concrete class that inherits a protocol: no members to check
    return any(is_unsupported(static_member(obj, name)) for name in get_protocol_members(protocol))


def _make_fast_metaclass(base: type) -> type:
    # Written once per base metaclass; the methods below call the base explicitly because
    # typing_extensions' metaclass must not be reached through super() (see its comments).
    base_instancecheck: Any = base.__instancecheck__
    base_subclasscheck: Any = base.__subclasscheck__
    base_register: Any = getattr(base, "register", abc.ABCMeta.register)

    class FastProtocolMeta(base):  # type: ignore[misc]
        """Protocol metaclass that memoises ``isinstance`` answers per checked class."""

        def __init__(cls, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)  # pyright: ignore[reportUnknownMemberType]
            # Every class gets its own memo: a protocol derived from this one (for example an
            # intersection) must never read its parent's answers. The "_abc_" prefix keeps the
            # attribute out of the protocol's members (typing skips such names).
            cls._abc_accel_memo = _Memo()
            _all_memos.add(cls._abc_accel_memo)

        def __instancecheck__(cls, instance: object) -> bool:
            checked = type(instance)
            memo: _Memo = cls._abc_accel_memo
            answer = memo.answers.get(id(checked))
            if answer is None:
                answer = not _switched_off(cls, instance) and bool(
                    base_instancecheck(cls, instance)
                )
                memo.remember(checked, answer)
            return answer

        def __subclasscheck__(cls, other: object) -> bool:
            # typing's check (through abc's subclass hook) knows only None markers.
            if isinstance(other, type) and _switched_off(cls, other):
                return False
            return bool(base_subclasscheck(cls, other))

        def register(cls, subclass: type) -> type:
            # A virtual subclass changes answers of this protocol and of every protocol
            # built on it; registration is rare, so start every memo afresh.
            for memo in list(_all_memos):
                memo.clear()
            return base_register(cls, subclass)  # type: ignore[no-any-return]

    FastProtocolMeta.__qualname__ = f"Fast{base.__qualname__}"
    return FastProtocolMeta


def fast_protocol(cls: _ProtocolT) -> _ProtocolT:
    """Make ``isinstance(obj, cls)`` a memoised, constant-time check.

    Apply above ``@runtime_checkable`` (which type checkers need to see literally)::

        @fast_protocol
        @runtime_checkable
        class GraphAPI(Protocol): ...

    Protocols that inherit from a fast protocol are fast too and keep their own memo.
    """
    if not getattr(cls, "_is_runtime_protocol", False):
        raise TypeError(f"fast_protocol() expects a @runtime_checkable Protocol class, got {cls!r}")
    meta = type(cls)
    if meta in _fast_metaclasses.values():
        return cls  # already fast, e.g. created from a fast base
    fast_meta = _fast_metaclasses.get(meta)
    if fast_meta is None:
        fast_meta = _fast_metaclasses.setdefault(meta, _make_fast_metaclass(meta))
    # Swapping the metaclass keeps the class object (and every reference to it) intact; the
    # two metaclasses share one layout because the fast one only adds methods.
    cls.__class__ = fast_meta
    memo = _Memo()
    cls._abc_accel_memo = memo  # type: ignore[attr-defined]
    _all_memos.add(memo)
    return cls
