"""DeviceAPI: naming, selecting and synchronising the devices of one accelerator type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol

if TYPE_CHECKING:
    import torch

DeviceLike: TypeAlias = "int | str | torch.device"
"""What torch accepts as a device: an index, ``"<type>:<index>"`` or a ``torch.device``."""


@dataclass(frozen=True)
class DeviceProperties:
    """What a device is: the answer of :meth:`DeviceAPI.get_device_properties`.

    Field names follow ``torch.cuda.get_device_properties()`` where it has them, so code
    that reads ``props.name`` or ``props.total_memory`` runs unchanged.
    """

    name: str
    total_memory: int  # bytes
    multi_processor_count: int | None  # SMs (CUDA), EUs (XPU), cores (CPU); None if unknown
    compute_capability: tuple[int, int] | None = None  # (major, minor) where devices have one


@fast_protocol
@runtime_checkable
class DeviceAPI(Protocol):
    """Which devices exist, which one this process uses, and how to wait for them.

    Device indices are ``int`` counted from 0. ``device_name()`` strings are accepted by
    ``torch.device`` and agree with :meth:`device`.
    """

    def device_name(self, device_index: int | None = None) -> str:
        """The torch device string of a device.

        Args:
            device_index: The device; ``None`` for the type alone.

        Returns:
            E.g. ``"cuda"`` or ``"cuda:1"`` (``"cpu"`` for any index).
        """
        ...

    def device(self, device_index: int | None = None) -> torch.device:
        """The ``torch.device`` of a device.

        Args:
            device_index: The device; ``None`` for the type alone.

        Returns:
            ``torch.device(self.device_name(device_index))``.
        """
        ...

    def set_device(self, device_index: int) -> None:
        """Make the device with this index current.

        The parameter is an ``int`` because backends were written against that: a backend
        may accept more (the built-in ones take ``"<type>:<index>"`` and ``torch.device``
        too), and ``accel.set_device()`` takes those forms for every backend.

        Args:
            device_index: Index of the device, below :meth:`device_count`.

        Raises:
            TypeError: ``device_index`` is not an index (a backend may raise ``ValueError``).
            ValueError: ``device_index`` is negative or, on a backend that counts its devices,
                at or beyond :meth:`device_count`.
        """
        ...

    def current_device(self) -> int:
        """The index of the current device.

        Returns:
            An index in ``[0, device_count())``; on a backend whose device names carry no
            index (the CPU: every index is the host) any non-negative slot, such as the
            process's ``LOCAL_RANK``.
        """
        ...

    def current_device_name(self) -> str:
        """``device_name(current_device())``: what to pass as ``device=`` for the current device.

        Returns:
            A torch device string.
        """
        ...

    def device_count(self) -> int:
        """The number of devices this process may use.

        Returns:
            The count; 0 when there are none.
        """
        ...

    def synchronize(self, device_index: int | None = None) -> None:
        """Block until all work queued on a device has finished."""
        ...

    def is_available(self) -> bool:
        """Whether this accelerator can run work in this process now.

        Returns:
            ``True`` when it can.
        """
        ...


@fast_protocol
@runtime_checkable
class DevicePropertiesAPI(Protocol):
    """A backend's own description of its devices (since API version 2).

    Optional, so that backends written before it stay :class:`~accel.Accelerator` backends:
    ``accel.get_device_properties()`` answers for every backend, from this member where a
    backend has it and from the core protocol's ``device_name``/``total_memory`` otherwise.
    """

    def get_device_properties(self, device_index: int | None = None) -> DeviceProperties:
        """Name, memory, processor count and compute capability of a device.

        Returns:
            The device's :class:`DeviceProperties`.
        """
        ...


@fast_protocol
@runtime_checkable
class DeviceCapabilityAPI(Protocol):
    """What a device can hold, as ``torch.accelerator.get_device_capability`` answers (since
    API version 3).

    Optional: ``accel.get_device_capability()`` answers for every backend, from this member
    where a backend has it and from :meth:`DTypeAPI.supported_dtypes` otherwise.
    """

    def get_device_capability(self, device_index: int | None = None) -> dict[str, Any]:
        """The capability of a device, under torch's keys.

        Returns:
            At least ``"supported_dtypes"``: the set of ``torch.dtype`` that tensors on the
            device can have and convert between.
        """
        ...
