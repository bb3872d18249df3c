"""Devices as Lightning names them, answered by the selected accel backend."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from accel import get_accelerator
from accel.protocols import Accelerator


def process_group_backend(acc: Accelerator, device_type: str) -> str:
    """The torch.distributed backend for ``acc``'s devices, as ``init_process_group`` takes it.

    The backend's ``communication_backend_name()``, written per device (``"npu:hccl"``)
    where that library does not declare the device type: gloo handles the tensors of a
    device torch knows no library for, but only when named for that device.
    """
    name = acc.communication_backend_name()
    if device_type in dist.Backend.backend_capability.get(name, [device_type]):
        return name
    pairs = f"{device_type}:{name}"
    # One gloo for both lets CPU tensors (barriers, object collectives) share it.
    return f"cpu:{name},{pairs}" if name == "gloo" else pairs


def current_device() -> torch.device:
    """The selected backend's current device, with its index (``cpu`` on the CPU backend)."""
    acc = get_accelerator()
    return acc.device(acc.current_device())


def device_index(device: torch.device | str | int) -> int | None:
    """The index in a Lightning device argument (``None``: the current device)."""
    if isinstance(device, int):
        return device
    return torch.device(device).index


def checked_device_index(
    acc: Accelerator, device: torch.device | str | int, what: str
) -> int | None:
    """:func:`device_index`, for a device of ``acc``'s type and in its range.

    Raises:
        ValueError: ``device`` is of another type, or its index is out of range.
    """
    expected = acc.device().type
    if not isinstance(device, int) and torch.device(device).type != expected:
        raise ValueError(
            f"{what}: device {device!r} is not of accel's backend {type(acc).__name__}, "
            f"which runs on {expected!r} devices"
        )
    index = device_index(device)
    count = acc.device_count()
    if index is not None and not 0 <= index < count:
        raise ValueError(f"{what}: device index {index} is out of range: expected 0..{count - 1}")
    return index


def parse_devices(acc: Accelerator, devices: Any) -> int | list[int]:
    """Lightning's ``devices`` for ``acc``: a process count on the CPU backend, device
    indices on a device backend (an int is the first N, ``-1`` all, a list or ``"0,2"``
    exact indices)."""
    given = devices
    if isinstance(devices, str):
        text = devices.strip()
        try:  # as Lightning's own parser reads it
            if "," in text:
                devices = [int(part) for part in text.split(",") if part.strip()]
            else:
                devices = int(text)
        except ValueError:
            raise ValueError(
                f"AccelAccelerator: devices={given!r}: expected an int, a list of "
                "device indices or a comma-separated string of them"
            ) from None
    is_cpu = acc.device().type == "cpu"
    count = acc.device_count()
    if isinstance(devices, bool) or not isinstance(devices, (int, list, tuple)):
        raise ValueError(
            f"AccelAccelerator: devices={given!r}: expected an int, a list of device "
            "indices or a comma-separated string of them"
        )
    if isinstance(devices, int):
        if is_cpu:
            if devices <= 0:
                raise ValueError(
                    f"AccelAccelerator: devices={given!r}: on the CPU backend devices is a "
                    "number of processes, expected an int > 0"
                )
            return devices
        if devices == -1:
            return list(range(count))
        if not 0 < devices <= count:
            raise ValueError(
                f"AccelAccelerator: devices={given!r}: expected 1..{count} (the backend's "
                "device count) or -1 for all"
            )
        return list(range(devices))
    if is_cpu:
        raise ValueError(
            f"AccelAccelerator: devices={given!r}: the CPU backend has no device indices; "
            "give a number of processes"
        )
    indices: list[object] = list(devices)  # pyright: ignore[reportUnknownArgumentType]
    valid = [i for i in indices if type(i) is int and 0 <= i < count]
    if not indices or len(valid) != len(indices) or len(set(valid)) != len(valid):
        raise ValueError(
            f"AccelAccelerator: devices={given!r}: expected distinct device indices in "
            f"0..{count - 1}"
        )
    return valid
