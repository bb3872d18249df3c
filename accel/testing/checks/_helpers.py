"""What the checks share: hypothesis strategies and two assertion helpers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from accel.testing._framework import KitConfig, property_settings

MiB = 1 << 20
indices = st.integers(min_value=0, max_value=1023)
seeds = st.integers(min_value=-(2**63), max_value=2**64 - 1)
# Random-but-representable inputs: float32 values whose "x * 2 + 1" is exact to compare.
float32s = st.floats(
    width=32, allow_nan=False, allow_infinity=False, min_value=-(2.0**100), max_value=2.0**100
)


def is_int(value: object) -> bool:
    """Whether ``value`` is an ``int`` and not a ``bool`` (which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def ill_typed(value: object) -> Any:
    """``value``, hidden from the type checker: the checks call members with arguments of the
    wrong type on purpose, to see the backend reject them."""
    return value


def holds(body: Callable[..., None], **strategies: st.SearchStrategy[Any]) -> None:
    """Run ``body`` as a hypothesis property; a failure re-raises with the minimal example."""
    property_settings(KitConfig.max_examples)(given(**strategies)(body))()


def raises(
    expected: type[Exception] | tuple[type[Exception], ...],
    mentions: str,
    call: Callable[[], object],
) -> None:
    """Assert that ``call`` raises ``expected`` (one type or any of several) with
    ``mentions`` in its message."""
    kinds = expected if isinstance(expected, tuple) else (expected,)
    described = " or ".join(kind.__name__ for kind in kinds)
    try:
        call()
    except kinds as error:
        assert mentions in str(error), f"{type(error).__name__} does not name {mentions!r}: {error}"
        return
    except Exception as error:
        raise AssertionError(f"expected {described} naming {mentions!r}, got {error!r}") from error
    raise AssertionError(f"expected {described} naming {mentions!r}; nothing was raised")
