"""The class-level marker that switches a capability's member off and says why.

A plain ``None`` marker (``Stream: None = None``) makes ``isinstance(acc, StreamAPI)``
False and the capability a static error, but calling it fails with "'NoneType' object is
not callable", which names neither the backend nor the capability. :func:`unsupported`
keeps the ``None`` annotation (so mypy and pyright reject the member exactly as before)
and puts a descriptor in the class instead: the capability protocols' ``isinstance``
counts it as the ``None`` it stands for (``accel.protocols._fast``), and reading the
member raises :class:`CapabilityError`, naming the class, the member, the protocol and the
check to make first. The error is an ``AttributeError``, so ``getattr(acc, name, None)``
still gives ``None`` and ``hasattr`` says the member is absent.
"""

from __future__ import annotations

from typing import Any, NoReturn

from typing_extensions import override


class CapabilityError(AttributeError):
    """A backend was asked for a member of a capability it does not have."""


class Unsupported:
    """The descriptor behind :func:`unsupported` (see the module's docstring)."""

    __slots__ = ("check", "member", "protocol", "reason")

    def __init__(self, protocol: str, check: str, reason: str) -> None:
        self.protocol = protocol
        self.check = check
        self.reason = reason
        self.member = "?"

    def __set_name__(self, owner: type, name: str) -> None:
        self.member = name

    def __get__(self, instance: object, owner: type | None = None) -> NoReturn:
        cls = type(instance) if instance is not None else owner
        name = cls.__name__ if cls is not None else "this backend"
        raise CapabilityError(
            f"{name} has no {self.member}: it is not a {self.protocol} ({self.reason}); "
            f"check isinstance(acc, {self.protocol}) or "
            f"accel.protocols.{self.check}(acc) first",
            name=self.member,
            obj=instance,
        )

    @override
    def __repr__(self) -> str:
        return f"<unsupported {self.protocol}.{self.member}>"


def unsupported(protocol: str, check: str, reason: str) -> Any:
    """A marker for a member of ``protocol`` that the class does not have, to assign to
    an attribute annotated ``None``: ``Stream: None = unsupported("StreamAPI",
    "supports_streams", "the device has no streams")``. ``check`` names the
    ``accel.protocols`` helper that tells whether an accelerator has the capability.

    Typed ``Any`` so that the ``None`` annotation, which is what type checkers read,
    accepts it.
    """
    return Unsupported(protocol, check, reason)


def is_unsupported(value: object) -> bool:
    """Whether ``value`` (a class attribute, read with ``inspect.getattr_static``) is a
    marker from :func:`unsupported`."""
    return isinstance(value, Unsupported)
