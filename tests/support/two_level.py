"""Counting the collectives that take accel.comm's two levels (for test scripts)."""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from typing import Any

from accel.comm import _two_level

COLLECTIVES = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor")


def count_two_level_calls() -> collections.Counter[str]:
    """From now on, count the calls that reach each of accel.comm._two_level's collectives
    (accel.comm looks them up there on each call); returns the live counter."""
    counter: collections.Counter[str] = collections.Counter()
    for name in COLLECTIVES:
        original: Callable[..., Any] = getattr(_two_level, name)

        @functools.wraps(original)
        def counting(
            *args: Any, __name: str = name, __original: Callable[..., Any] = original
        ) -> Any:
            counter[__name] += 1
            return __original(*args)

        setattr(_two_level, name, counting)
    return counter
