"""Devices of one torch device type, through ``torch.get_device_module(device_type)``.

Every torch device type (cuda, xpu, mtia, and out-of-tree PrivateUse1 types such as npu,
hpu and mlu) exposes the same module functions, so one implementation serves them all.
"""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

import torch

from accel._checks import check_index, check_optional_index


def device_module(device_type: str) -> ModuleType:
    """``torch.<device_type>``; ``RuntimeError`` when torch has no such module.

    ``torch.get_device_module`` caches its answers, so this is cheap on hot paths.
    """
    module: ModuleType = torch.get_device_module(device_type)
    return module


class TorchDeviceMixin:
    """DeviceAPI's selection members (count, current, set, synchronize, availability)."""

    device_type: ClassVar[str]

    def device_count(self) -> int:
        """Devices visible to this process."""
        return int(device_module(self.device_type).device_count())

    def current_device(self) -> int:
        """Index of the current device."""
        return int(device_module(self.device_type).current_device())

    def set_device(self, device_index: int) -> None:
        """Make ``device_index`` current; ``ValueError`` beyond ``device_count()``."""
        index = check_index(device_index)
        count = self.device_count()
        if index >= count:
            raise ValueError(
                f"device_index must be below device_count() = {count} for "
                f"{self.device_type}, got {index}"
            )
        device_module(self.device_type).set_device(index)

    def synchronize(self, device_index: int | None = None) -> None:
        """Wait for all queued work on the device (default: current)."""
        device_module(self.device_type).synchronize(check_optional_index(device_index))

    def is_available(self) -> bool:
        """Whether torch sees at least one device of this type."""
        return bool(device_module(self.device_type).is_available())
