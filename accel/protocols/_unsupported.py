"""Switching a capability's members off, with an error that says why.

A backend that lacks a capability declares its members absent: a bare class-level ``None``
annotation for the type checkers (assigning the class to the protocol is then a static
error in mypy and pyright) and nothing at run time, so that no structural check can mistake
the member for present: ``isinstance``/``issubclass`` with any runtime protocol (``typing``'s
or ``typing_extensions``'), ``hasattr``, ``dir``, ``inspect.getattr_static`` and
``unittest.mock.create_autospec`` all see no member. Reading it raises
:class:`CapabilityError` (an ``AttributeError``, so ``getattr(acc, name, None)`` is
``None``) naming the class, the member, the protocol and the check to make first.

:class:`AbsentMembers` does this for the No-mixins (``NoStreamMixin``, ...). Where a class
switches off a member that a later base implements, the implementation would win the
ordinary lookup, so the class itself gets the :func:`unsupported` descriptor instead; the
capability protocols' ``isinstance`` counts that descriptor as the ``None`` it stands for
(``accel.protocols._fast``).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, NoReturn

from typing_extensions import TypeIs, override


class CapabilityError(AttributeError, RuntimeError):
    """A backend was asked for a member of a capability it does not have.

    An ``AttributeError`` (``hasattr`` answers False, ``getattr`` defaults apply) and a
    ``RuntimeError``, which ``torch.accelerator`` raises where a device lacks what it is
    asked, so code written for torch's catches it too."""


def capability_error(
    owner: str, member: str, protocol: str, check: str, reason: str, obj: object = None
) -> CapabilityError:
    """The error for reading ``member`` of ``protocol`` on a class that lacks it.

    Args:
        owner: The class's name.
        member: The member asked for.
        protocol: The capability protocol the member belongs to.
        check: How to ask first: an ``accel.protocols`` helper's name, or ``""`` when
            ``isinstance`` is the only check.
        reason: Why the backend lacks the capability.
        obj: The instance asked, if any.

    Returns:
        The error, to raise.
    """
    how = f"check isinstance(acc, {protocol})"
    if check:
        how += f" or accel.protocols.{check}(acc)"
    return CapabilityError(
        f"{owner} has no {member}: it is not a {protocol} ({reason}); {how} first",
        name=member,
        obj=obj,
    )


class Unsupported:
    """A descriptor that switches a member off and raises :class:`CapabilityError` when read."""

    __slots__ = ("check", "member", "protocol", "reason")

    def __init__(self, protocol: str, check: str, reason: str, member: str = "?") -> None:
        self.protocol = protocol
        self.check = check
        self.reason = reason
        self.member = member

    def __set_name__(self, owner: type, name: str) -> None:
        self.member = name

    def error(self, owner: str, obj: object = None) -> CapabilityError:
        """The error for reading this member on class ``owner``."""
        return capability_error(owner, self.member, self.protocol, self.check, self.reason, obj)

    def __get__(self, instance: object, owner: type | None = None) -> NoReturn:
        cls = type(instance) if instance is not None else owner
        raise self.error(cls.__name__ if cls is not None else "this backend", instance)

    @override
    def __repr__(self) -> str:
        return f"<unsupported {self.protocol}.{self.member}>"


def unsupported(protocol: str, check: str, reason: str) -> Any:
    """A class-level descriptor for a member of ``protocol`` that the class does not have, to
    assign to an attribute annotated ``None``: ``Stream: None = unsupported("StreamAPI",
    "supports_streams", "the device has no streams")``. ``check`` names the
    ``accel.protocols`` helper that tells whether an accelerator has the capability.

    Prefer :class:`AbsentMembers`: a descriptor is a class attribute, which protocols of
    other libraries take for the member itself.

    Typed ``Any`` so that the ``None`` annotation, which is what type checkers read,
    accepts it.
    """
    return Unsupported(protocol, check, reason)


def is_unsupported(value: object) -> TypeIs[Unsupported]:
    """Whether ``value`` (a class attribute, read with ``inspect.getattr_static``) is a
    marker from :func:`unsupported`."""
    return isinstance(value, Unsupported)


def declared_absent(obj: object, name: str) -> bool:
    """Whether ``obj`` (an instance or a class) declares its member ``name`` absent, with
    :class:`AbsentMembers` or an :func:`unsupported` descriptor."""
    cls = obj if isinstance(obj, type) else type(obj)
    absent: dict[str, Unsupported] = getattr(cls, "_accel_absent_members", {})
    if name in absent:
        return True
    return any(is_unsupported(klass.__dict__.get(name)) for klass in cls.__mro__)


class Absence(NamedTuple):
    """Members of one capability protocol that a class declares absent, and why. (A
    NamedTuple, not a dataclass: a frozen dataclass costs ~1 ms to make, paid by every
    ``get_accelerator()``.)"""

    protocol: str
    check: str
    reason: str
    members: tuple[str, ...]


class AbsentMembers:
    """Base of classes that declare capability members absent.

    A subclass lists its :class:`Absence` entries in ``_accel_absent`` and annotates each
    member ``None`` (the annotation is what type checkers read; a member without one is a
    ``TypeError`` when the class is made)::

        class NoStreamMixin(AbsentMembers):
            _accel_absent = (Absence("StreamAPI", "supports_streams", WHY, ("Stream",)),)
            Stream: None
    """

    _accel_absent: ClassVar[tuple[Absence, ...]] = ()
    # name -> descriptor of every member absent on the class, for __getattr__'s message.
    _accel_absent_members: ClassVar[dict[str, Unsupported]] = {}

    @override
    def __init_subclass__(cls, **kwargs: Any) -> None:
        own = cls.__dict__.get("_accel_absent", ())
        annotations = inspect.get_annotations(cls)  # the class's own, unevaluated
        for absence in own:
            unannotated = [name for name in absence.members if name not in annotations]
            if unannotated:
                raise TypeError(
                    f"{cls.__qualname__} declares {', '.join(unannotated)} absent without a "
                    "None annotation; type checkers would not know they are absent"
                )
        cls._accel_absent_members = _absent_members(cls)
        # After the members are settled: other mixins' hooks ask what the class has
        # (RuntimeEnvMixin: whether it is a StreamAPI).
        super().__init_subclass__(**kwargs)

    @override
    def __dir__(self) -> list[str]:
        # A member switched off over a later base's implementation is a class attribute
        # (the descriptor): still not a name of the instance.
        absent = type(self)._accel_absent_members
        return [name for name in super().__dir__() if name not in absent]

    # Hidden from type checkers: a __getattr__ would make every name an attribute to them.
    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> NoReturn:
            # Only reached when ordinary lookup failed: absent members are not attributes.
            marker = type(self)._accel_absent_members.get(name)
            if marker is not None:
                raise marker.error(type(self).__name__, self)
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self
            )


def _absent_members(cls: type) -> dict[str, Unsupported]:
    """The members absent on ``cls``: for each declared name, the first class in the MRO
    that declares or defines it decides. Where a later base implements the member, ``cls``
    itself gets the descriptor, so that the declaration (which comes first) wins."""
    names = {
        name
        for klass in cls.__mro__
        for absence in klass.__dict__.get("_accel_absent", ())
        for name in absence.members
    }
    absent: dict[str, Unsupported] = {}
    for name in sorted(names):
        position = 0
        for position, klass in enumerate(cls.__mro__):  # noqa: B007  # read after the loop
            declaring = [a for a in klass.__dict__.get("_accel_absent", ()) if name in a.members]
            value = klass.__dict__.get(name)
            if declaring:
                a = declaring[0]
                absent[name] = Unsupported(a.protocol, a.check, a.reason, name)
            elif is_unsupported(value):
                absent[name] = value
            elif name not in klass.__dict__:
                continue
            break
        if name in absent and any(name in k.__dict__ for k in cls.__mro__[position + 1 :]):
            setattr(cls, name, absent[name])  # shadow what a later base implements
    return absent
