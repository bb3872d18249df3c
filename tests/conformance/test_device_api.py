"""DeviceAPI: names, torch.device objects and the current device agree."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accel.protocols import Accelerator, DeviceAPI

indices = st.integers(min_value=0, max_value=1023)


def test_backend_satisfies_the_core_protocol(accelerator: Accelerator) -> None:
    assert isinstance(accelerator, Accelerator)
    assert isinstance(accelerator, DeviceAPI)


@given(index=indices)
def test_device_name_and_device_agree_with_torch(accelerator: Accelerator, index: int) -> None:
    name = accelerator.device_name(index)
    assert torch.device(name) == accelerator.device(index)
    assert accelerator.device(index).type == accelerator.device_name()


def test_unindexed_name_is_the_device_type(accelerator: Accelerator) -> None:
    assert torch.device(accelerator.device_name()) == accelerator.device()
    assert accelerator.device().index is None


def test_current_device_name_names_the_current_device(accelerator: Accelerator) -> None:
    current = accelerator.current_device()
    assert isinstance(current, int)
    assert accelerator.current_device_name() == accelerator.device_name(current)


def test_set_device_round_trips(accelerator: Accelerator) -> None:
    before = accelerator.current_device()
    try:
        for index in range(accelerator.device_count()):
            accelerator.set_device(index)
            assert accelerator.current_device() == index
    finally:
        accelerator.set_device(before)


def test_counts_and_availability_are_plain_values(accelerator: Accelerator) -> None:
    count = accelerator.device_count()
    assert isinstance(count, int)
    assert count >= 1  # an available backend has at least one device
    assert accelerator.is_available() is True


def test_synchronize_accepts_current_and_explicit_devices(accelerator: Accelerator) -> None:
    x = torch.ones(1024, device=accelerator.current_device_name()) * 2
    accelerator.synchronize()
    accelerator.synchronize(accelerator.current_device())
    assert float(x.sum()) == 2048.0


@pytest.mark.parametrize(
    ("bad", "error"),
    [(-1, ValueError), ("0", TypeError), (True, TypeError), (1.0, TypeError)],
)
def test_bad_device_index_is_rejected_with_its_name(
    accelerator: Accelerator, bad: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="device_index"):
        accelerator.device_name(bad)  # type: ignore[arg-type]
    with pytest.raises(error, match="device_index"):
        accelerator.set_device(bad)  # type: ignore[arg-type]
