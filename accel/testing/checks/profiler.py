"""ProfilerAPI: nested ranges (only on backends that claim it)."""

from __future__ import annotations

from hypothesis import strategies as st

from accel.protocols import (
    Accelerator,
    ProfilerAPI,
)
from accel.testing._framework import check
from accel.testing.checks._helpers import holds, ill_typed, raises


@check(ProfilerAPI, "range_push/range_pop")
def profiler_ranges_nest(acc: Accelerator) -> None:
    """Nested ranges (1 to 8 deep) push and pop, one pop too many raises ``RuntimeError``, and a
    name that is not a ``str`` is rejected.
    """
    assert isinstance(acc, ProfilerAPI)

    def body(names: list[str]) -> None:
        for name in names:
            acc.range_push(name)
        for _ in names:
            acc.range_pop()
        raises(RuntimeError, "no open range", acc.range_pop)

    holds(body, names=st.lists(st.text(max_size=40), min_size=1, max_size=8))
    raises(TypeError, "msg", lambda: ill_typed(acc).range_push(3))
