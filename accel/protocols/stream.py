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
        """A new stream on a device.

        Args:
            priority: Lower numbers run first.

        Returns:
            The stream.
        """
        ...

    def Event(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> torch.Event:
        """A new event.

        Args:
            enable_timing: Let the event measure elapsed time between two records.
            blocking: Make waiting on the event block the calling thread.
            interprocess: Let other processes share the event.

        Returns:
            The event.
        """
        ...

    def stream(self, stream: torch.Stream | None) -> AbstractContextManager[None]:
        """Make ``stream`` current inside the ``with`` block.

        Args:
            stream: The stream; ``None`` changes nothing.

        Returns:
            The context manager.

        Raises:
            TypeError: ``stream`` is neither a ``torch.Stream`` nor ``None``.
        """
        ...

    def current_stream(self, device_index: int | None = None) -> torch.Stream:
        """The stream that new work on a device goes to.

        Returns:
            The stream.
        """
        ...

    def default_stream(self, device_index: int | None = None) -> torch.Stream:
        """A device's default stream.

        Returns:
            The stream.
        """
        ...


@fast_protocol
@runtime_checkable
class SetStreamAPI(Protocol):
    """Making a stream current for good, as ``torch.accelerator.set_stream`` does (since API
    version 3). :meth:`StreamAPI.stream` does it for a ``with`` block."""

    def set_stream(self, stream: torch.Stream) -> None:
        """Make ``stream`` the current stream of its device, and its device the current one.

        Args:
            stream: A stream of this accelerator's device type.

        Raises:
            TypeError: ``stream`` is not a ``torch.Stream``.
            ValueError: ``stream`` is on a device of another type.
        """
        ...
