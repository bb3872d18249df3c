"""TensorAPI: placement and pinned staging."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from accel.protocols import (
    Accelerator,
    TensorAPI,
)
from accel.testing._framework import check
from accel.testing.checks._helpers import holds, ill_typed, raises


@check(TensorAPI, "on_accelerator/pin_memory/is_pinned")
def tensor_placement_and_staging(acc: Accelerator) -> None:
    """Tensors made on the backend's device names are ``on_accelerator`` and a meta tensor is
    not; ``pin_memory`` keeps the values and ``is_pinned`` is true of its result; bad arguments
    are rejected.
    """

    def body(shape: list[int]) -> None:
        for device in (acc.device_name(), acc.current_device_name()):
            assert acc.on_accelerator(torch.zeros(shape, device=device)), (
                f"a tensor made on {device!r} is not on_accelerator"
            )
        host = torch.arange(float(len(shape)))
        pinned = acc.pin_memory(host)
        assert torch.equal(pinned, host), "pin_memory() changed the values"
        answer = acc.is_pinned(pinned)
        assert answer is True, f"is_pinned(pin_memory(t)) is {answer!r}, not True"

    holds(body, shape=st.lists(st.integers(min_value=0, max_value=5), max_size=3))
    assert not acc.on_accelerator(torch.empty(3, device="meta")), "a meta tensor is on_accelerator"
    raises(TypeError, "tensor", lambda: ill_typed(acc).on_accelerator([1.0]))
    raises(ValueError, "align_bytes", lambda: acc.pin_memory(torch.zeros(2), align_bytes=0))
