"""StreamAPI through the device module's Stream, Event and stream context."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import ClassVar

import torch

from accel._checks import check_optional_index
from accel.mixins.torch_device import device_module


class TorchStreamMixin:
    """Streams and events of a torch device type."""

    device_type: ClassVar[str]

    def _device(self, device_index: int | None) -> torch.device:
        index = check_optional_index(device_index)
        return (
            torch.device(self.device_type, index)
            if index is not None
            else torch.device(self.device_type)
        )

    def Stream(self, device_index: int | None = None, priority: int = 0) -> torch.Stream:
        """A new stream on the device (default: current)."""
        stream: torch.Stream = device_module(self.device_type).Stream(
            device=self._device(device_index), priority=priority
        )
        return stream

    def Event(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> torch.Event:
        """A new event."""
        event: torch.Event = device_module(self.device_type).Event(
            enable_timing=enable_timing, blocking=blocking, interprocess=interprocess
        )
        return event

    def stream(self, stream: torch.Stream | None) -> AbstractContextManager[None]:
        """Make ``stream`` current inside the ``with`` block."""
        if stream is not None and not isinstance(stream, torch.Stream):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"stream must be a torch.Stream or None, got {type(stream).__name__}")
        context: AbstractContextManager[None] = device_module(self.device_type).stream(stream)
        return context

    def current_stream(self, device_index: int | None = None) -> torch.Stream:
        """The stream new work on the device goes to."""
        stream: torch.Stream = device_module(self.device_type).current_stream(
            check_optional_index(device_index)
        )
        return stream

    def default_stream(self, device_index: int | None = None) -> torch.Stream:
        """The device's default stream."""
        stream: torch.Stream = device_module(self.device_type).default_stream(
            check_optional_index(device_index)
        )
        return stream
