"""StreamAPI: the No-mixin for synchronous devices, and torch device-module streams.

A member annotated ``None`` and declared absent (``accel.protocols._unsupported``) makes
``isinstance(acc, StreamAPI)`` False at run time, for accel's protocols and anyone else's,
and assigning the class to ``StreamAPI`` a static error in mypy and pyright; reading it
raises ``CapabilityError`` naming the backend and the capability. Put the No-mixin before
any mixin that implements the capability in the bases: the first one decides.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, ClassVar

import torch

from accel._device_module import device_module
from accel._signatures import keywords
from accel._validate import check_optional_index
from accel.protocols._contract import implements
from accel.protocols._unsupported import Absence, AbsentMembers
from accel.protocols.stream import SetStreamAPI, StreamAPI

_WHY = (
    "the backend has no streams or events; its work runs in call order, to completion on "
    "the CPU and on the device's one queue on MPS"
)


class NoStreamMixin(AbsentMembers):
    """The backend has no streams or events.

    ``is_synchronized_device()`` follows from this (see ``RuntimeEnvMixin``).
    """

    _accel_absent = (
        Absence("StreamAPI", "supports_streams", _WHY,
                ("Stream", "Event", "stream", "current_stream", "default_stream")),
        Absence("SetStreamAPI", "", _WHY, ("set_stream",)),
    )  # fmt: skip
    Stream: None
    Event: None
    stream: None
    current_stream: None
    default_stream: None
    set_stream: None


@implements(StreamAPI, SetStreamAPI)
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
        """A new ``torch.<type>.Stream``."""
        stream: torch.Stream = device_module(self.device_type).Stream(
            device=self._device(device_index), priority=priority
        )
        return stream

    def Event(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> torch.Event:
        """A new ``torch.<type>.Event``. ``blocking``/``interprocess`` are passed only when set, so
        devices whose events take ``enable_timing`` alone (``torch.xpu.Event``, Gaudi's) work;
        setting one such a device's events lack is a ``ValueError`` naming it."""
        factory = device_module(self.device_type).Event
        kwargs: dict[str, bool] = {"enable_timing": enable_timing}
        accepted = keywords(factory)
        for name, value in (("blocking", blocking), ("interprocess", interprocess)):
            if not value:
                continue
            if accepted is not None and name not in accepted:
                raise ValueError(
                    f"{name}=True: torch.{self.device_type}.Event takes no {name!r} "
                    f"(it takes {', '.join(sorted(accepted))}); expected {name}=False here"
                )
            kwargs[name] = value
        event: torch.Event = factory(**kwargs)
        return event

    def stream(self, stream: torch.Stream | None) -> AbstractContextManager[None]:
        """``torch.<type>.stream(stream)``."""
        if stream is not None and not isinstance(stream, torch.Stream):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"stream must be a torch.Stream or None, got {type(stream).__name__}")
        context: AbstractContextManager[None] = device_module(self.device_type).stream(stream)
        return context

    def current_stream(self, device_index: int | None = None) -> torch.Stream:
        stream: torch.Stream = device_module(self.device_type).current_stream(
            check_optional_index(device_index)
        )
        return stream

    def default_stream(self, device_index: int | None = None) -> torch.Stream:
        """``torch.<type>.default_stream``; where the module has none (``torch.xpu``: its streams
        have no legacy default stream to synchronise with), the device's current stream, as
        DeepSpeed's XPU accelerator answers: inside a ``stream()`` block, the block's."""
        module = device_module(self.device_type)
        name = (
            "default_stream"
            if callable(getattr(module, "default_stream", None))
            else "current_stream"
        )
        getter: Any = getattr(module, name)
        stream: torch.Stream = getter(check_optional_index(device_index))
        return stream

    def set_stream(self, stream: torch.Stream) -> None:
        """Through ``torch.<type>.set_stream``, else ``torch.accelerator.set_stream``."""
        if not isinstance(stream, torch.Stream):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"stream must be a torch.Stream, got {type(stream).__name__}")
        if stream.device.type != self.device_type:
            raise ValueError(
                f"stream must be a {self.device_type} stream, got one on {stream.device}"
            )
        setter = getattr(device_module(self.device_type), "set_stream", None)
        (setter if callable(setter) else torch.accelerator.set_stream)(stream)
