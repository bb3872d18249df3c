"""A group's set-up runs eagerly when code torch.compile traces reaches it
(accel.comm._segment's ``_not_traced``, which does so without importing torch.compile's
machinery where nothing compiles: tests/test_startup_cost.py)."""

from __future__ import annotations

import torch

from accel.comm._segment import _not_traced  # pyright: ignore[reportPrivateUsage]


def test_a_not_traced_function_runs_eagerly_on_every_compiled_call() -> None:
    seen: list[bool] = []

    def set_up(value: int) -> int:
        seen.append(torch.compiler.is_compiling())
        return value

    wrapped = _not_traced(set_up)
    assert wrapped(3) == 3
    compiled = torch.compile(lambda t: t * wrapped(2), backend="eager")
    assert compiled(torch.ones(2)).tolist() == [2.0, 2.0]
    # Steady state: the next calls compile nothing again (a training loop checked with
    # this stance must not fail because a group was set up inside it).
    with torch.compiler.set_stance("fail_on_recompile"):
        for _ in range(2):
            assert compiled(torch.ones(2)).tolist() == [2.0, 2.0]
    # Called each time, never traced: traced, it would have run while compiling.
    assert seen == [False] * 4
    assert wrapped.__name__ == "set_up"
