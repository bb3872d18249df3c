"""TensorAPI: placement answers and host staging."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accel.protocols import Accelerator

shapes = st.lists(st.integers(min_value=0, max_value=5), max_size=3)


@given(shape=shapes)
def test_tensors_made_on_the_device_are_on_the_accelerator(
    accelerator: Accelerator, shape: list[int]
) -> None:
    on_default = torch.zeros(shape, device=accelerator.device_name())
    on_current = torch.zeros(shape, device=accelerator.current_device_name())
    assert accelerator.on_accelerator(on_default)
    assert accelerator.on_accelerator(on_current)


def test_meta_tensors_are_not_on_the_accelerator(accelerator: Accelerator) -> None:
    assert not accelerator.on_accelerator(torch.empty(3, device="meta"))


@given(values=st.lists(st.floats(allow_nan=False, width=32), max_size=16))
def test_pinned_tensor_keeps_values_and_reports_pinned(
    accelerator: Accelerator, values: list[float]
) -> None:
    host = torch.tensor(values, dtype=torch.float32)
    pinned = accelerator.pin_memory(host)
    assert torch.equal(pinned, host)
    assert accelerator.is_pinned(pinned)


def test_non_tensors_are_rejected_with_the_argument_name(accelerator: Accelerator) -> None:
    for method in (accelerator.on_accelerator, accelerator.pin_memory, accelerator.is_pinned):
        with pytest.raises(TypeError, match="tensor"):
            method([1.0, 2.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="align_bytes"):
        accelerator.pin_memory(torch.zeros(2), align_bytes=0)
