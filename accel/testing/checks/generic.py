"""Checks every protocol gets: claimed members are real, unclaimed ones absent."""

from __future__ import annotations

import inspect

from typing_extensions import get_protocol_members

from accel.protocols import (
    Accelerator,
)

# Members that may not be called bare: they need a state the check cannot set up.
_PRECONDITIONS = {"range_pop"}


def members_are_real(acc: Accelerator, protocol: type) -> None:
    """Claimed members run without NotImplementedError and return a value where one is typed.

    Members that need arguments (and ``range_pop``, which needs an open range) are left to the
    property checks.

    Args:
        protocol: A protocol the backend claims.
    """
    for member in sorted(get_protocol_members(protocol)):
        declared = getattr(protocol, member)
        signature = inspect.signature(declared)
        parameters = list(signature.parameters.values())[1:]  # without self
        if member in _PRECONDITIONS or any(
            p.default is inspect.Parameter.empty for p in parameters
        ):
            continue  # needs arguments: the property checks exercise it
        try:
            result = getattr(acc, member)()
        except NotImplementedError as error:
            raise AssertionError(
                f"{member}() raises NotImplementedError on a backend that claims it"
            ) from error
        if signature.return_annotation not in ("None", None):
            assert result is not None, (
                f"{member}() returned None; it is typed {signature.return_annotation}"
            )


def members_belong_to_the_class(acc: Accelerator, protocol: type) -> None:
    """Claimed members are the class's, not set on the instance: ``isinstance`` answers are
    decided per class (and remembered), so an instance that adds a capability's members
    (say, after asking its device in ``__init__``) makes every instance of the class look
    the same. A backend whose capabilities depend on the device found makes a class per
    variant and picks it in ``__new__`` (as ``accel.backends.mps`` does).

    Args:
        protocol: A protocol the backend claims.
    """
    cls = type(acc)
    on_instance = [
        member
        for member in sorted(get_protocol_members(protocol))
        if inspect.getattr_static(cls, member, None) is None
    ]
    assert not on_instance, (
        f"{', '.join(on_instance)} set on the instance, not defined by {cls.__qualname__}: "
        "capabilities are decided per class; make a class per variant (chosen in __new__)"
    )


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_BY_NAME = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def members_take_the_protocols_arguments(acc: Accelerator, protocol: type) -> None:
    """Each claimed member takes every call its protocol allows: as many positional
    arguments, each parameter by its name (callers write ``memory_allocated(device_index=0)``),
    and only the arguments the protocol requires.

    Args:
        protocol: A protocol the backend claims.
    """
    refused: list[str] = []
    for member in sorted(get_protocol_members(protocol)):
        declared = inspect.getattr_static(protocol, member, None)
        if not inspect.isfunction(declared):
            continue
        try:
            actual = inspect.signature(getattr(acc, member))
        except (TypeError, ValueError):  # a builtin without a signature: not checkable
            continue
        expected = list(inspect.signature(declared).parameters.values())[1:]  # without self
        positional = [p for p in expected if p.kind in _POSITIONAL]
        required = [p for p in positional if p.default is inspect.Parameter.empty]
        keywords = {
            p.name: None
            for p in expected
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
        }
        # (what the call is, its arguments, whether the others may be left out)
        calls: list[tuple[str, tuple[None, ...], dict[str, None], bool]] = [
            (f"{len(positional)} positional arguments", (None,) * len(positional), {}, False),
            ("only the required arguments", (None,) * len(required), keywords, False),
        ]
        calls += [
            (f"{p.name}= by name", (), {p.name: None}, True) for p in expected if p.kind in _BY_NAME
        ]
        for what, args, kwargs, partial in calls:
            try:
                (actual.bind_partial if partial else actual.bind)(*args, **kwargs)
            except TypeError as error:
                refused.append(f"{member}{actual} refuses {what} ({error})")
    assert not refused, f"members differ from {protocol.__name__}'s signatures: " + "; ".join(
        refused
    )


def no_partial_capabilities(acc: Accelerator, protocol: type) -> None:
    """An unclaimed capability has no callable members (they could only be silent no-ops).

    Args:
        protocol: A protocol the backend does not claim.
    """
    callables = [
        member
        for member in sorted(get_protocol_members(protocol))
        if callable(inspect.getattr_static(acc, member, None))
    ]
    assert not callables, (
        f"{', '.join(callables)} callable, but the backend is not a {protocol.__name__}"
    )
