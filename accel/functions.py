"""Device-generic functions that work with every backend, whatever accel it was written for.

Each function acts on ``accelerator`` (default: ``get_accelerator()``, whose errors it then
raises: ``RuntimeError`` where no backend can be selected). A ``device_index`` is an index,
``"<type>:<index>"`` or a ``torch.device``, ``None`` for the current device: ``TypeError``
where it is none of those (a ``bool`` is not an index), ``ValueError`` where it is negative,
an unparsable string or a device of another type. A function documents these two
parameters only where it differs. They are ``torch.accelerator``'s names, each taking a
device as torch's does (the protocols' members take an index), and how callers use the
members added to the protocols after the first release (and the device arguments
``DistributedDataParallel`` wants, which differ by device type): a backend that has such a
member is asked through it, and one written before it gets an honest answer built from the
core :class:`~accel.Accelerator` members, or an error naming the backend and the member
where no honest answer exists.

    import accel
    accel.set_device("cuda:1")
    with accel.device_index(0), accel.fork_rng():
        print(accel.get_device_properties().total_memory)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from accel._validate import check_device, check_index
from accel.mixins.device import device_scope, select_device
from accel.mixins.dtype import allocatable_dtypes
from accel.mixins.rng import fork_rng_states
from accel.protocols import (
    Accelerator,
    AccumulatedStatsAPI,
    DeviceCapabilityAPI,
    DeviceLike,
    DeviceProperties,
    DevicePropertiesAPI,
    ForkRNGAPI,
    HostCacheAPI,
    MemoryInfoAPI,
    SetStreamAPI,
    StreamAPI,
)
from accel.protocols._unsupported import CapabilityError, capability_error

if TYPE_CHECKING:
    import torch

__all__ = [
    "current_accelerator",
    "current_device_index",
    "current_stream",
    "ddp_device_ids",
    "ddp_output_device",
    "device_count",
    "device_index",
    "empty_cache",
    "empty_host_cache",
    "fork_rng",
    "get_device_capability",
    "get_device_properties",
    "get_memory_info",
    "is_available",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "process_group_device_id",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "set_device",
    "set_device_index",
    "set_stream",
    "synchronize",
]


def _resolve(accelerator: Accelerator | None) -> Accelerator:
    if accelerator is not None:
        return accelerator
    from accel._selection import get_accelerator

    return get_accelerator()


def _lacks(acc: Accelerator, member: str, protocol: type, reason: str) -> CapabilityError:
    """The error for calling ``member`` on ``acc``, which is not a ``protocol`` (``reason``)."""
    return capability_error(type(acc).__name__, member, protocol.__name__, "", reason, acc)


def _no_device(device: object) -> bool:
    """Whether ``device`` is a negative ``int``, which torch's device selection takes as
    "leave the current device" (``torch.cuda.set_device(-1)``, ``torch.accelerator.
    set_device_index(-1)``, ``torch.cuda.device(-1)``: Megatron's RNG code passes it)."""
    return isinstance(device, int) and not isinstance(device, bool) and device < 0


def set_device(device: DeviceLike, accelerator: Accelerator | None = None) -> None:
    """Make ``device`` current; a negative index does nothing, as in torch.

    On devices whose names carry no index (the CPU), a name without one names every device
    slot and leaves the current one as it is; elsewhere it is a ``ValueError``. The
    backend's ``set_device`` receives the index as an ``int``, which every backend takes
    (and which its own ``set_device`` refuses when negative).

    Args:
        device: An index, ``"<type>:<index>"`` or a ``torch.device``.

    Raises:
        TypeError: ``device`` is not an ``int`` (``bool`` excluded), ``str`` or ``torch.device``.
        ValueError: ``device`` is an unparsable string, a device of another type, or a name
            without an index where names carry one; or the backend's ``set_device`` refuses
            the index (the built-in ones: past ``device_count()``, except the CPU's, whose
            indices are rank slots).
    """
    if not _no_device(device):
        select_device(_resolve(accelerator), device, "device")


def device_index(
    device: DeviceLike | None, accelerator: Accelerator | None = None
) -> AbstractContextManager[None]:
    """Make ``device`` current inside a ``with`` block; the previous device comes back after.
    ``None`` or a negative index leaves the current device, as in torch.

    Args:
        device: An index, ``"<type>:<index>"`` or a ``torch.device``.

    Returns:
        The context manager. ``device`` is checked when the block is entered, and raises
        there what :func:`set_device` raises.
    """
    if device is None or _no_device(device):
        return contextlib.nullcontext()
    return device_scope(_resolve(accelerator), device, "device")


def get_device_properties(
    device_index: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> DeviceProperties:
    """Name, memory, processor count and compute capability of a device.

    From the backend's own ``get_device_properties`` where it has one
    (:class:`~accel.protocols.DevicePropertiesAPI`); otherwise ``name`` is the device's name,
    ``total_memory`` the backend's ``total_memory()``, and the processor count and compute
    capability are ``None`` (unknown), never guessed.

    Returns:
        The device's :class:`~accel.protocols.DeviceProperties`.
    """
    acc = _resolve(accelerator)
    index = _index_of(acc, device_index)
    if isinstance(acc, DevicePropertiesAPI):
        return acc.get_device_properties(index)
    index = acc.current_device() if index is None else index
    return DeviceProperties(
        name=acc.device_name(index),
        total_memory=acc.total_memory(index),
        multi_processor_count=None,
    )


def _index_of(
    acc: Accelerator, device: DeviceLike | None, argument: str = "device_index"
) -> int | None:
    """The index ``device`` names on ``acc`` (None: the current device); ValueError naming
    ``argument`` for a device of another type."""
    if device is None:
        return None
    import torch

    return check_device(device, torch.device(acc.device_name()).type, argument)


def fork_rng(
    devices: Iterable[int] | None = None,
    enabled: bool = True,
    accelerator: Accelerator | None = None,
) -> AbstractContextManager[None]:
    """Draw random numbers freely inside the ``with`` block; the generators come back after.

    The backend's own ``fork_rng`` where it has one (:class:`~accel.protocols.ForkRNGAPI`),
    else one built from its ``get_rng_state``/``set_rng_state``.

    Args:
        devices: The device indices whose generators are restored with the host's; ``None``
            for every device.
        enabled: ``False`` makes the context manager do nothing.

    Returns:
        The context manager. On entering it, an index in ``devices`` that is not an
        ``int`` raises ``TypeError`` and a negative one ``ValueError``.
    """
    acc = _resolve(accelerator)
    if isinstance(acc, ForkRNGAPI):
        return acc.fork_rng(devices, enabled)
    return fork_rng_states(acc, devices, enabled)


def reset_accumulated_memory_stats(
    device_index: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> None:
    """Zero the allocator's counters that only grow (allocation and free totals).

    Raises:
        CapabilityError: The backend has no ``reset_accumulated_memory_stats`` (it is not
            an :class:`~accel.protocols.AccumulatedStatsAPI`, optional since API version 2):
            accel cannot know what its ``memory_stats()`` counts, so it does not pretend to
            have reset it.
    """
    acc = _resolve(accelerator)
    if not isinstance(acc, AccumulatedStatsAPI):
        reason = "accel cannot know which of its memory_stats() counters to reset"
        raise _lacks(acc, "reset_accumulated_memory_stats", AccumulatedStatsAPI, reason)
    acc.reset_accumulated_memory_stats(_index_of(acc, device_index))


def _takes_device_ids(acc: Accelerator) -> bool:
    # DistributedDataParallel takes device_ids/output_device only for modules on one
    # device that is not the host; for host (CPU) modules both must be None.
    import torch

    return torch.device(acc.device_name()).type != "cpu"


def ddp_device_ids(device: int, accelerator: Accelerator | None = None) -> list[int] | None:
    """``DistributedDataParallel(device_ids=...)`` for a module on device ``device``.

    Args:
        device: The module's device index.

    Returns:
        ``[device]`` on accelerators; ``None`` on the CPU, where DDP refuses device ids.

    Raises:
        TypeError: ``device`` is not an ``int``.
        ValueError: ``device`` is negative.
    """
    index = check_index(device, "device")
    return [index] if _takes_device_ids(_resolve(accelerator)) else None


def ddp_output_device(device: int, accelerator: Accelerator | None = None) -> int | None:
    """``DistributedDataParallel(output_device=...)`` for a module on device ``device``.

    Args:
        device: The module's device index.

    Returns:
        ``device`` on accelerators; ``None`` on the CPU.

    Raises:
        TypeError: ``device`` is not an ``int``.
        ValueError: ``device`` is negative.
    """
    index = check_index(device, "device")
    return index if _takes_device_ids(_resolve(accelerator)) else None


def process_group_device_id(
    device: DeviceLike, accelerator: Accelerator | None = None
) -> torch.device | None:
    """``init_process_group(device_id=...)`` for this process's device ``device``.

    Args:
        device: An index, ``"<type>:<index>"`` or a ``torch.device``; a name without an
            index means the current device.

    Returns:
        That device, with its index, on accelerators; ``None`` on the CPU, which torch
        refuses there ("device_id parameter must be an accelerator with an index").

    Raises:
        TypeError: ``device`` is not an ``int`` (``bool`` excluded), ``str`` or ``torch.device``.
        ValueError: ``device`` is negative, an unparsable string, or a device of another type.
    """
    acc = _resolve(accelerator)
    index = _index_of(acc, device, "device")
    if not _takes_device_ids(acc):
        return None
    return acc.device(acc.current_device() if index is None else index)


def set_device_index(device: DeviceLike, accelerator: Accelerator | None = None) -> None:
    """:func:`set_device` under ``torch.accelerator``'s name.

    Args:
        device: An index, ``"<type>:<index>"`` or a ``torch.device``.

    Raises:
        TypeError: ``device`` is not an ``int`` (``bool`` excluded), ``str`` or ``torch.device``.
        ValueError: What :func:`set_device` raises (an index at or beyond
            ``device_count()`` on the built-in backends, a device of another type).
    """
    set_device(device, accelerator)


def current_device_index(accelerator: Accelerator | None = None) -> int:
    """The index of the current device (the backend's ``current_device()``), under
    ``torch.accelerator``'s name.

    Returns:
        The backend's ``current_device()`` (see :class:`~accel.protocols.DeviceAPI`: on the
        CPU, a rank slot that may pass ``device_count()``).
    """
    return _resolve(accelerator).current_device()


def current_accelerator(
    check_available: bool = False, accelerator: Accelerator | None = None
) -> torch.device | None:
    """The device type of the accelerator, as ``torch.accelerator.current_accelerator()``
    names it: ``torch.device("cuda")``, ... One difference: accel's CPU backend is an
    accelerator, so this is ``torch.device("cpu")`` there, where torch answers ``None``.

    Args:
        check_available: Answer ``None`` when the backend's ``is_available()`` is False.

    Returns:
        The backend's ``device()`` (a ``torch.device`` without an index), or ``None``.

    Raises:
        TypeError: ``check_available`` is not a ``bool``.
    """
    if not isinstance(check_available, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"check_available must be a bool, got {type(check_available).__name__}")
    acc = _resolve(accelerator)
    if check_available and not acc.is_available():
        return None
    return acc.device()


def get_memory_info(
    device_index: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> tuple[int, int]:
    """Free and total memory of a device, as ``torch.accelerator.get_memory_info`` answers.

    From the backend's own ``get_memory_info`` where it has one
    (:class:`~accel.protocols.MemoryInfoAPI`); otherwise ``(available_memory(),
    total_memory())`` of the core members: every backend knows both. On the CPU: the host's
    available and total memory as psutil reports them, capped by the process's cgroup
    limit where one applies.

    Returns:
        ``(free, total)`` in bytes.

    Raises:
        ValueError: Also where ``device_index`` is out of range on a backend that counts its
            devices per call.
    """
    acc = _resolve(accelerator)
    index = _index_of(acc, device_index)
    if isinstance(acc, MemoryInfoAPI):
        return acc.get_memory_info(index)
    return acc.available_memory(index), acc.total_memory(index)


def get_device_capability(
    device_index: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> dict[str, Any]:
    """What a device can hold, as ``torch.accelerator.get_device_capability`` answers.

    From the backend's own ``get_device_capability`` where it has one
    (:class:`~accel.protocols.DeviceCapabilityAPI`); otherwise ``{"supported_dtypes": ...}``
    found by making a one-element tensor of every (non-quantized) dtype on the device.

    Returns:
        The capability under torch's keys; ``"supported_dtypes"`` is a set of ``torch.dtype``.
    """
    acc = _resolve(accelerator)
    index = _index_of(acc, device_index)
    if isinstance(acc, DeviceCapabilityAPI):
        return acc.get_device_capability(index)
    device = acc.device(acc.current_device() if index is None else index)
    return {"supported_dtypes": set(allocatable_dtypes(str(device)))}


def empty_host_cache(accelerator: Accelerator | None = None) -> None:
    """Release the page-locked host memory the device runtime caches and no tensor uses.

    Raises:
        CapabilityError: The backend keeps no such cache (it is not a
            :class:`~accel.protocols.HostCacheAPI`: the CPU, whose "pinned" memory is
            ordinary memory, and devices whose runtime offers no call for it).
    """
    acc = _resolve(accelerator)
    if not isinstance(acc, HostCacheAPI):
        reason = "its runtime keeps no cache of page-locked host memory to release"
        raise _lacks(acc, "empty_host_cache", HostCacheAPI, reason)
    acc.empty_host_cache()


def set_stream(stream: torch.Stream, accelerator: Accelerator | None = None) -> None:
    """Make ``stream`` the current stream of its device, as ``torch.accelerator.set_stream``.

    Args:
        stream: A stream of the accelerator's device type.

    Raises:
        CapabilityError: The backend cannot set a stream (it is not a
            :class:`~accel.protocols.SetStreamAPI`; the CPU has no streams).
        TypeError: ``stream`` is not a ``torch.Stream``.
        ValueError: ``stream`` is on a device of another type.
    """
    acc = _resolve(accelerator)
    if not isinstance(acc, SetStreamAPI):
        raise _lacks(acc, "set_stream", SetStreamAPI, "it has no streams to make current")
    acc.set_stream(stream)


# torch.accelerator's names for the protocols' members: the same calls, with a device given
# in any form torch takes (the members take an index).


def device_count(accelerator: Accelerator | None = None) -> int:
    """The backend's ``device_count()`` (:class:`~accel.protocols.DeviceAPI`)."""
    return _resolve(accelerator).device_count()


def is_available(accelerator: Accelerator | None = None) -> bool:
    """The backend's ``is_available()`` (:class:`~accel.protocols.DeviceAPI`). Unlike
    ``torch.accelerator.is_available()``, True on the CPU backend: it is an accelerator
    here."""
    return _resolve(accelerator).is_available()


def synchronize(device: DeviceLike | None = None, accelerator: Accelerator | None = None) -> None:
    """The backend's ``synchronize`` (:class:`~accel.protocols.DeviceAPI`) of ``device``.

    Args:
        device: As ``device_index`` elsewhere here (torch's name for it).
    """
    acc = _resolve(accelerator)
    acc.synchronize(_index_of(acc, device, "device"))


def empty_cache(accelerator: Accelerator | None = None) -> None:
    """The backend's ``empty_cache()`` (:class:`~accel.protocols.MemoryUsageAPI`)."""
    _resolve(accelerator).empty_cache()


def memory_allocated(
    device_index: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> int:
    """The backend's ``memory_allocated`` (:class:`~accel.protocols.MemoryUsageAPI`)."""
    acc = _resolve(accelerator)
    return acc.memory_allocated(_index_of(acc, device_index))


def memory_reserved(
    device_index: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> int:
    """The backend's ``memory_reserved`` (:class:`~accel.protocols.MemoryUsageAPI`)."""
    acc = _resolve(accelerator)
    return acc.memory_reserved(_index_of(acc, device_index))


def max_memory_allocated(
    device_index: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> int:
    """The backend's ``max_memory_allocated`` (:class:`~accel.protocols.MemoryStatsAPI`).

    Raises:
        CapabilityError: The backend keeps no peaks (it is not a ``MemoryStatsAPI``).
    """
    acc = _resolve(accelerator)
    return acc.max_memory_allocated(_index_of(acc, device_index))


def max_memory_reserved(
    device_index: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> int:
    """The backend's ``max_memory_reserved`` (:class:`~accel.protocols.MemoryStatsAPI`).

    Raises:
        CapabilityError: As :func:`max_memory_allocated`.
    """
    acc = _resolve(accelerator)
    return acc.max_memory_reserved(_index_of(acc, device_index))


def memory_stats(
    device_index: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> dict[str, int]:
    """The backend's ``memory_stats`` (:class:`~accel.protocols.MemoryStatsAPI`).

    Raises:
        CapabilityError: As :func:`max_memory_allocated`.
    """
    acc = _resolve(accelerator)
    return acc.memory_stats(_index_of(acc, device_index))


def reset_peak_memory_stats(
    device_index: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> None:
    """The backend's ``reset_peak_memory_stats`` (:class:`~accel.protocols.MemoryStatsAPI`).

    Raises:
        CapabilityError: As :func:`max_memory_allocated`.
    """
    acc = _resolve(accelerator)
    acc.reset_peak_memory_stats(_index_of(acc, device_index))


def current_stream(
    device: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> torch.Stream:
    """The backend's ``current_stream`` (:class:`~accel.protocols.StreamAPI`) of ``device``.

    Args:
        device: As ``device_index`` elsewhere here (torch's name for it).

    Raises:
        CapabilityError: The backend has no streams (it is not a ``StreamAPI``: the CPU).
    """
    acc = _resolve(accelerator)
    if not isinstance(acc, StreamAPI):
        raise _lacks(acc, "current_stream", StreamAPI, "it has no streams")
    return acc.current_stream(_index_of(acc, device, "device"))
