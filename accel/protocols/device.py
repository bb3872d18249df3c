"""DeviceAPI: naming, selecting and synchronising the devices of one accelerator type."""

from __future__ import annotations

from typing import TYPE_CHECKING

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol

if TYPE_CHECKING:
    import torch


@fast_protocol
@runtime_checkable
class DeviceAPI(Protocol):
    """Which devices exist, which one this process uses, and how to wait for them.

    Device indices are ``int`` counted from 0. ``device_name()`` strings are accepted by
    ``torch.device`` and agree with :meth:`device`.
    """

    def device_name(self, device_index: int | None = None) -> str:
        """The torch device string, e.g. ``"cuda"`` or ``"cuda:1"`` (``"cpu"`` for any index)."""
        ...

    def device(self, device_index: int | None = None) -> torch.device:
        """``torch.device(self.device_name(device_index))``."""
        ...

    def set_device(self, device_index: int) -> None:
        """Make ``device_index`` the current device of this process."""
        ...

    def current_device(self) -> int:
        """Index of the current device."""
        ...

    def current_device_name(self) -> str:
        """``device_name(current_device())``: what to pass as ``device=`` for the current device."""
        ...

    def device_count(self) -> int:
        """Number of devices this process may use (0 when none)."""
        ...

    def synchronize(self, device_index: int | None = None) -> None:
        """Block until all work queued on the device (default: current) has finished."""
        ...

    def is_available(self) -> bool:
        """Whether this accelerator can run work in this process now."""
        ...
