"""DeviceAPI implementations: device naming from a type name, and torch device modules.

Every torch device type (cuda, xpu, mtia, and out-of-tree PrivateUse1 types such as npu,
hpu and mlu) exposes the same module functions, so one implementation serves them all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from types import ModuleType
from typing import ClassVar

import torch
from typing_extensions import Protocol

from accel._device_module import device_module
from accel._signatures import takes_positional
from accel._validate import check_device, check_index, check_optional_index
from accel.protocols._contract import implements
from accel.protocols.device import DeviceAPI, DeviceLike, DeviceProperties, DevicePropertiesAPI


class _NamedDevices(Protocol):
    device_type: ClassVar[str]
    indexed_device_names: ClassVar[bool]

    def device_name(self, device_index: int | None = None) -> str: ...
    def current_device(self) -> int: ...


class _SelectableDevices(Protocol):
    def device_name(self, device_index: int | None = None) -> str: ...
    def current_device(self) -> int: ...
    def set_device(self, device_index: int) -> None: ...


def _names_no_index(device: DeviceLike, device_type: str, argument: str) -> ValueError:
    return ValueError(
        f"{argument} {str(device)!r} names no device index; expected e.g. '{device_type}:0'"
    )


def select_device(
    devices: _SelectableDevices, device: DeviceLike, argument: str = "device_index"
) -> None:
    """Make ``device`` current through the backend's ``int``-taking ``set_device``.

    Args:
        devices: The backend.
        device: An index, ``"<type>[:<index>]"`` or a ``torch.device``. A name without an
            index leaves the current device as it is on devices whose names carry none (the
            CPU: it names every slot).
        argument: The caller's name for ``device``, in the errors.

    Raises:
        TypeError: ``device`` is not an ``int`` (``bool`` excluded), ``str`` or
            ``torch.device``.
        ValueError: ``device`` is negative, an unparsable string, a device of another type,
            or a name without an index on a device whose names carry one; or what the
            backend's ``set_device`` raises.
    """
    device_type = torch.device(devices.device_name()).type
    index = check_device(device, device_type, argument)
    if index is None:
        if ":" not in devices.device_name(0):
            return
        raise _names_no_index(device, device_type, argument)
    devices.set_device(index)


@contextlib.contextmanager
def device_scope(
    devices: _SelectableDevices, device: DeviceLike, argument: str = "device_index"
) -> Generator[None, None, None]:
    """:func:`select_device` inside a ``with`` block; the previous device comes back after.

    Args:
        devices: The backend.
        device: An index, ``"<type>[:<index>]"`` or a ``torch.device``.
        argument: The caller's name for ``device``, in the errors.

    Returns:
        The context manager. Entering it raises what :func:`select_device` raises; leaving
        it makes the device that was current on entry current again.
    """
    previous = devices.current_device()
    select_device(devices, device, argument)
    try:
        yield
    finally:
        devices.set_device(previous)


def check_below_count(index: int, count: int, device_type: str) -> int:
    """``index``, or a ``ValueError`` naming the device count when it is not below it.

    Args:
        index: A non-negative device index.
        count: The number of devices.
        device_type: The torch device type, for the message.

    Returns:
        ``index``.

    Raises:
        ValueError: ``index`` is at or beyond ``count``.
    """
    if index >= count:
        raise ValueError(
            f"device_index must be below device_count() = {count} for {device_type}, got {index}"
        )
    return index


class CountedDevices(Protocol):
    """What :func:`check_counted_index` asks of a backend."""

    device_type: ClassVar[str]

    def device_count(self) -> int: ...


def check_counted_index(devices: CountedDevices, device_index: int | None) -> int | None:
    """``device_index`` checked (:func:`~accel._validate.check_optional_index`) and, when
    given, below ``devices.device_count()`` (:func:`check_below_count`).

    Args:
        devices: The backend whose devices are counted.
        device_index: An index, or ``None`` for the current device.

    Returns:
        The index, or ``None`` for the current device.
    """
    index = check_optional_index(device_index)
    if index is not None:
        check_below_count(index, devices.device_count(), devices.device_type)
    return index


@implements(DeviceAPI)
class SingleDeviceMixin:
    """DeviceAPI's selection members for a device type with one device and no selection
    call in its torch module (``torch.mps``): device 0 is always current."""

    device_type: ClassVar[str]

    def device_count(self) -> int:
        """``torch.<type>.device_count()``: 1 where the device is present, else 0."""
        return int(device_module(self.device_type).device_count())

    def current_device(self) -> int:
        """0: the only device."""
        return 0

    def set_device(self, device_index: DeviceLike) -> None:
        """Accepts the only device: ``0``, ``"<type>:0"`` or that ``torch.device``."""
        index = check_device(device_index, self.device_type)
        if index is None:
            raise _names_no_index(device_index, self.device_type, "device_index")
        check_below_count(index, self.device_count(), self.device_type)

    def synchronize(self, device_index: int | None = None) -> None:
        """Also refuses an index at or beyond ``device_count()`` (``ValueError``)."""
        check_counted_index(self, device_index)
        device_module(self.device_type).synchronize()

    def is_available(self) -> bool:
        return bool(device_module(self.device_type).is_available())


@implements(DeviceAPI)
class DeviceNamingMixin:
    """``device_name``/``device``/``current_device_name`` for a torch device type.

    Set ``device_type`` (``"cuda"``, ``"xpu"``, ...). Devices whose indices torch ignores
    (the CPU) set ``indexed_device_names = False``, so every index names ``"cpu"``.
    """

    device_type: ClassVar[str]
    indexed_device_names: ClassVar[bool] = True

    def device_name(self, device_index: int | None = None) -> str:
        """``device_type`` alone for every index where ``indexed_device_names`` is ``False``."""
        # Hot path (a `device=` argument per tensor): a plain non-negative int skips the
        # general validation, which still sees everything else.
        if device_index is None:
            return self.device_type
        if type(device_index) is not int or device_index < 0:
            check_index(device_index)
        if not self.indexed_device_names:
            return self.device_type
        return f"{self.device_type}:{device_index}"

    def device(self, device_index: int | None = None) -> torch.device:
        return torch.device(self.device_name(device_index))

    def current_device_name(self: _NamedDevices) -> str:
        if not self.indexed_device_names:
            # Hot path (every `device=` argument): the name cannot depend on the index.
            return self.device_type
        return self.device_name(self.current_device())

    def device_index(
        self: _SelectableDevices, device_index: DeviceLike
    ) -> contextlib.AbstractContextManager[None]:
        """Make a device current inside a ``with`` block; the previous one comes back after.

        Args:
            device_index: An index, ``"<type>[:<index>]"`` or a ``torch.device``.

        Returns:
            The context manager (:func:`device_scope`). Entering it raises what
            :func:`select_device` raises.
        """
        return device_scope(self, device_index)


def module_total_memory(module: ModuleType, index: int) -> int:
    """A device's size in bytes.

    Args:
        module: The device's torch module (``torch.cuda``, ``torch.hpu``, ...).
        index: The device index.

    Returns:
        ``get_device_properties(index).total_memory`` where the properties are an object
        with it, else ``mem_get_info(index)``'s total (Gaudi's properties are a ``str``).
    """
    total = getattr(module.get_device_properties(index), "total_memory", None)
    if total is None:
        _free, total = module.mem_get_info(index)
    return int(total)


@implements(DeviceAPI, DevicePropertiesAPI)
class TorchDeviceMixin:
    """DeviceAPI's selection members (count, current, set, synchronize, availability)."""

    device_type: ClassVar[str]

    def device_count(self) -> int:
        return int(device_module(self.device_type).device_count())

    def current_device(self) -> int:
        return int(device_module(self.device_type).current_device())

    def set_device(self, device_index: DeviceLike) -> None:
        """Also takes ``"<type>:<i>"`` or a ``torch.device``; a name without an index is a
        ``ValueError`` (torch refuses it too: it would not say which device)."""
        index = check_device(device_index, self.device_type)
        if index is None:
            raise _names_no_index(device_index, self.device_type, "device_index")
        device_module(self.device_type).set_device(
            check_below_count(index, self.device_count(), self.device_type)
        )

    def synchronize(self, device_index: int | None = None) -> None:
        """``torch.<type>.synchronize(i)``; on a module whose ``synchronize()`` takes no device
        (Gaudi: one device per process) the index is checked against ``device_count()``."""
        index = check_optional_index(device_index)
        sync = device_module(self.device_type).synchronize
        if takes_positional(sync):
            sync(index)
            return
        if index is not None:
            check_below_count(index, self.device_count(), self.device_type)
        sync()

    def is_available(self) -> bool:
        return bool(device_module(self.device_type).is_available())

    def get_device_properties(self, device_index: int | None = None) -> DeviceProperties:
        """``torch.<type>.get_device_properties``; the name is ``"<type> device"`` where torch
        gives none, the processor count the SMs (CUDA, ROCm) or EUs (XPU)."""
        index = check_optional_index(device_index)
        module = device_module(self.device_type)
        index = self.current_device() if index is None else index
        found = module.get_device_properties(index)
        if isinstance(found, str):  # Gaudi: a description, not an object
            found = None
        processors = getattr(found, "multi_processor_count", None)  # CUDA, ROCm
        if processors is None:
            processors = getattr(found, "gpu_eu_count", None)  # XPU
        major, minor = getattr(found, "major", None), getattr(found, "minor", None)
        return DeviceProperties(
            name=str(getattr(found, "name", f"{self.device_type} device")),
            total_memory=module_total_memory(module, index),
            multi_processor_count=None if processors is None else int(processors),
            compute_capability=(
                (int(major), int(minor)) if major is not None and minor is not None else None
            ),
        )
