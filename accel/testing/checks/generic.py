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
