"""Device strings and ``torch.device`` objects derived from one device type name."""

from __future__ import annotations

from typing import ClassVar

import torch
from typing_extensions import Protocol

from accel._checks import check_optional_index


class _NamedDevices(Protocol):
    def device_name(self, device_index: int | None = None) -> str: ...
    def current_device(self) -> int: ...


class DeviceNamingMixin:
    """``device_name``/``device``/``current_device_name`` for a torch device type.

    Set ``device_type`` (``"cuda"``, ``"xpu"``, ...). Devices whose indices torch ignores
    (the CPU) set ``indexed_device_names = False``, so every index names ``"cpu"``.
    """

    device_type: ClassVar[str]
    indexed_device_names: ClassVar[bool] = True

    def device_name(self, device_index: int | None = None) -> str:
        """``"<type>:<index>"``, or ``"<type>"`` without an index or for unindexed devices."""
        index = check_optional_index(device_index)
        if index is None or not self.indexed_device_names:
            return self.device_type
        return f"{self.device_type}:{index}"

    def device(self, device_index: int | None = None) -> torch.device:
        """``torch.device(self.device_name(device_index))``."""
        return torch.device(self.device_name(device_index))

    def current_device_name(self: _NamedDevices) -> str:
        """The device string of the current device."""
        if not getattr(self, "indexed_device_names", True):
            # Hot path (every `device=` argument): the name cannot depend on the index.
            return self.device_name()
        return self.device_name(self.current_device())
