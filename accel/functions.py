"""Device-generic functions that work with every backend, whatever accel it was written for.

Each function acts on ``accelerator`` (default: ``get_accelerator()``). They are how
callers use the members added to the protocols after the first release (and the device
arguments ``DistributedDataParallel`` wants, which differ by device type): a backend that
has such a member is asked through it, and one written before it gets an honest answer
built from the core :class:`~accel.Accelerator` members, or an error naming the backend
and the member where no honest answer exists.

    import accel
    accel.set_device("cuda:1")
    with accel.device_index(0), accel.fork_rng():
        print(accel.get_device_properties().total_memory)
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from accel._validate import check_device, check_index
from accel.mixins.device import device_scope, select_device
from accel.mixins.rng import fork_rng_states
from accel.protocols import (
    Accelerator,
    AccumulatedStatsAPI,
    DeviceLike,
    DeviceProperties,
    DevicePropertiesAPI,
    ForkRNGAPI,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "ddp_device_ids",
    "ddp_output_device",
    "device_index",
    "fork_rng",
    "get_device_properties",
    "process_group_device_id",
    "reset_accumulated_memory_stats",
    "set_device",
]


def _resolve(accelerator: Accelerator | None) -> Accelerator:
    if accelerator is not None:
        return accelerator
    from accel._selection import get_accelerator

    return get_accelerator()


def set_device(device: DeviceLike, accelerator: Accelerator | None = None) -> None:
    """Make ``device`` current.

    On devices whose names carry no index (the CPU), a name without one names every device
    slot and leaves the current one as it is; elsewhere it is a ``ValueError``. The
    backend's ``set_device`` receives the index as an ``int``, which every backend takes.

    Args:
        device: An index, ``"<type>:<index>"`` or a ``torch.device``.
        accelerator: The accelerator; ``None`` for :func:`~accel.get_accelerator`'s.

    Raises:
        TypeError: ``device`` is not an ``int`` (``bool`` excluded), ``str`` or ``torch.device``.
        ValueError: ``device`` is negative, an unparsable string, a device of another type,
            or a name without an index where names carry one; or the backend's
            ``set_device`` refuses the index (the built-in ones: past ``device_count()``).
        RuntimeError: ``accelerator`` is ``None`` and no backend can be selected (see
            :func:`~accel.get_accelerator` for this and its other errors).
    """
    select_device(_resolve(accelerator), device)


def device_index(
    device: DeviceLike, accelerator: Accelerator | None = None
) -> AbstractContextManager[None]:
    """Make ``device`` current inside a ``with`` block; the previous device comes back after.

    Args:
        device: An index, ``"<type>:<index>"`` or a ``torch.device``.
        accelerator: The accelerator; ``None`` for :func:`~accel.get_accelerator`'s.

    Returns:
        The context manager. ``device`` is checked when the block is entered, and raises
        there what :func:`set_device` raises.

    Raises:
        RuntimeError: ``accelerator`` is ``None`` and no backend can be selected (see
            :func:`~accel.get_accelerator` for this and its other errors).
    """
    return device_scope(_resolve(accelerator), device)


def get_device_properties(
    device_index: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> DeviceProperties:
    """Name, memory, processor count and compute capability of a device.

    From the backend's own ``get_device_properties`` where it has one
    (:class:`~accel.protocols.DevicePropertiesAPI`); otherwise ``name`` is the device's name,
    ``total_memory`` the backend's ``total_memory()``, and the processor count and compute
    capability are ``None`` (unknown), never guessed.

    Args:
        device_index: An index, ``"<type>:<index>"`` or a ``torch.device``, as torch's
            ``get_device_properties`` takes; ``None`` for the current device.
        accelerator: The accelerator; ``None`` for :func:`~accel.get_accelerator`'s.

    Returns:
        The device's :class:`~accel.protocols.DeviceProperties`.

    Raises:
        TypeError: ``device_index`` is not an ``int`` (``bool`` excluded), ``str`` or
            ``torch.device``.
        ValueError: ``device_index`` is negative, an unparsable string, or a device of another type.
        RuntimeError: ``accelerator`` is ``None`` and no backend can be selected (see
            :func:`~accel.get_accelerator` for this and its other errors).
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
        accelerator: The accelerator; ``None`` for :func:`~accel.get_accelerator`'s.

    Returns:
        The context manager. On entering it, an index in ``devices`` that is not an
        ``int`` raises ``TypeError`` and a negative one ``ValueError``.

    Raises:
        RuntimeError: ``accelerator`` is ``None`` and no backend can be selected (see
            :func:`~accel.get_accelerator` for this and its other errors).
    """
    acc = _resolve(accelerator)
    if isinstance(acc, ForkRNGAPI):
        return acc.fork_rng(devices, enabled)
    return fork_rng_states(acc, devices, enabled)


def reset_accumulated_memory_stats(
    device_index: DeviceLike | None = None, accelerator: Accelerator | None = None
) -> None:
    """Zero the allocator's counters that only grow (allocation and free totals).

    Args:
        device_index: An index, ``"<type>:<index>"`` or a ``torch.device``; ``None`` for the
            current device.
        accelerator: The accelerator; ``None`` for :func:`~accel.get_accelerator`'s.

    Raises:
        NotImplementedError: The backend has no ``reset_accumulated_memory_stats``
            (:class:`~accel.protocols.AccumulatedStatsAPI`): accel cannot know what its
            ``memory_stats()`` counts, so it does not pretend to have reset it.
        TypeError: ``device_index`` is not an ``int`` (``bool`` excluded), ``str`` or
            ``torch.device``.
        ValueError: ``device_index`` is negative, an unparsable string, or a device of another type.
        RuntimeError: ``accelerator`` is ``None`` and no backend can be selected (see
            :func:`~accel.get_accelerator` for this and its other errors).
    """
    acc = _resolve(accelerator)
    if not isinstance(acc, AccumulatedStatsAPI):
        raise NotImplementedError(
            f"backend {type(acc).__qualname__} has no reset_accumulated_memory_stats() "
            "(optional since accel API_VERSION 2: see accel.protocols.AccumulatedStatsAPI), "
            "so its accumulated counters cannot be reset"
        )
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
        accelerator: The accelerator; ``None`` for :func:`~accel.get_accelerator`'s.

    Returns:
        ``[device]`` on accelerators; ``None`` on the CPU, where DDP refuses device ids.

    Raises:
        TypeError: ``device`` is not an ``int``.
        ValueError: ``device`` is negative.
        RuntimeError: ``accelerator`` is ``None`` and no backend can be selected (see
            :func:`~accel.get_accelerator` for this and its other errors).
    """
    index = check_index(device, "device")
    return [index] if _takes_device_ids(_resolve(accelerator)) else None


def ddp_output_device(device: int, accelerator: Accelerator | None = None) -> int | None:
    """``DistributedDataParallel(output_device=...)`` for a module on device ``device``.

    Args:
        device: The module's device index.
        accelerator: The accelerator; ``None`` for :func:`~accel.get_accelerator`'s.

    Returns:
        ``device`` on accelerators; ``None`` on the CPU.

    Raises:
        TypeError: ``device`` is not an ``int``.
        ValueError: ``device`` is negative.
        RuntimeError: ``accelerator`` is ``None`` and no backend can be selected (see
            :func:`~accel.get_accelerator` for this and its other errors).
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
        accelerator: The accelerator; ``None`` for :func:`~accel.get_accelerator`'s.

    Returns:
        That device, with its index, on accelerators; ``None`` on the CPU, which torch
        refuses there ("device_id parameter must be an accelerator with an index").

    Raises:
        TypeError: ``device`` is not an ``int`` (``bool`` excluded), ``str`` or ``torch.device``.
        ValueError: ``device`` is negative, an unparsable string, or a device of another type.
        RuntimeError: ``accelerator`` is ``None`` and no backend can be selected (see
            :func:`~accel.get_accelerator` for this and its other errors).
    """
    acc = _resolve(accelerator)
    index = _index_of(acc, device, "device")
    if not _takes_device_ids(acc):
        return None
    return acc.device(acc.current_device() if index is None else index)
