"""StreamAPI: asynchronous execution queues and the events that order them."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol

if TYPE_CHECKING:
    import torch


@fast_protocol
@runtime_checkable
class StreamAPI(Protocol):
    """Streams and events, typed against ``torch.Stream`` and ``torch.Event``.

    The capitalised factories keep DeepSpeed's call sites working unchanged:
    ``acc.Stream()`` and ``acc.Event(enable_timing=True)``.
    """

    def Stream(self, device_index: int | None = None, priority: int = 0) -> torch.Stream:
        """A new stream on the device (default: current); lower priority numbers run first."""
        ...

    def Event(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> torch.Event:
        """A new event; with ``enable_timing`` it can measure elapsed time between two records."""
        ...

    def stream(self, stream: torch.Stream | None) -> AbstractContextManager[None]:
        """Context manager that makes ``stream`` current inside it (``None`` changes nothing)."""
        ...

    def current_stream(self, device_index: int | None = None) -> torch.Stream:
        """The stream that new work on the device goes to."""
        ...

    def default_stream(self, device_index: int | None = None) -> torch.Stream:
        """The device's default stream."""
        ...
