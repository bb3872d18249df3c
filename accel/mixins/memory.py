"""Memory implementations: host memory (the process's RSS), torch allocators (a device
module's own, or ``torch.accelerator``'s generic statistics), and the No-mixin of devices
that keep no peak statistics."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import types
from collections.abc import Callable
from typing import ClassVar, cast

from typing_extensions import Protocol

from accel import _host
from accel._device_module import device_module
from accel._validate import check_optional_index
from accel.mixins.device import CountedDevices, check_counted_index, module_total_memory
from accel.protocols._contract import implements
from accel.protocols._unsupported import Absence, AbsentMembers
from accel.protocols.memory import (
    AccumulatedStatsAPI,
    MemoryInfoAPI,
    MemoryStatsAPI,
    MemoryUsageAPI,
)

_log = logging.getLogger("accel")


class _SizedMemory(Protocol):
    def total_memory(self, device_index: int | None = None) -> int: ...
    def available_memory(self, device_index: int | None = None) -> int: ...


@implements(MemoryInfoAPI)
class MemoryInfoMixin:
    """``get_memory_info`` from the backend's own ``available_memory`` and ``total_memory``."""

    def get_memory_info(self: _SizedMemory, device_index: int | None = None) -> tuple[int, int]:
        """``(available_memory(i), total_memory(i))``."""
        return self.available_memory(device_index), self.total_memory(device_index)


_NO_PEAKS = "the device's runtime keeps no peak memory statistics"


class NoMemoryStatsMixin(AbsentMembers):
    """The device reports memory in use but keeps no peaks: the :class:`MemoryStatsAPI`
    members are absent (the backend is a ``CoreAccelerator``, not an ``Accelerator``).

    Put it before any mixin that implements them in the bases.
    """

    _accel_absent = (
        Absence("MemoryStatsAPI", "supports_memory_stats", _NO_PEAKS,
                ("max_memory_allocated", "max_memory_reserved", "memory_stats",
                 "reset_peak_memory_stats")),
        Absence("AccumulatedStatsAPI", "", _NO_PEAKS, ("reset_accumulated_memory_stats",)),
    )  # fmt: skip
    max_memory_allocated: None
    max_memory_reserved: None
    memory_stats: None
    reset_peak_memory_stats: None
    reset_accumulated_memory_stats: None


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    # glibc keeps freed heap pages until malloc_trim hands them back; other C libraries
    # (musl, macOS, Windows) return large blocks on free() and expose no such call.
    path = ctypes.util.find_library("c")
    if path is None:
        return None
    trim = getattr(ctypes.CDLL(path), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return cast("Callable[[int], int]", trim)


@implements(MemoryUsageAPI)
class HostMemoryUsageMixin(MemoryInfoMixin):
    """Memory in use from the process's resident set, shared by every device index: what
    a host-memory device without peaks composes (after ``NoMemoryStatsMixin``).

    Host memory is one pool for the whole process, so allocated and reserved are both the
    RSS and every device index reports the same numbers.
    """

    def empty_cache(self) -> None:
        """Hand freed heap memory back to the OS (glibc ``malloc_trim``; others cache nothing)."""
        trim = _malloc_trim()
        if trim is not None:
            trim(0)

    def memory_allocated(self, device_index: int | None = None) -> int:
        """The process's resident set size."""
        check_optional_index(device_index)
        return _host.process_memory.rss()

    def memory_reserved(self, device_index: int | None = None) -> int:
        """Same as :meth:`memory_allocated`: the host allocator's cache is part of the RSS."""
        return self.memory_allocated(device_index)

    def total_memory(self, device_index: int | None = None) -> int:
        """Physical memory, capped by the process's cgroup limit."""
        check_optional_index(device_index)
        return _host.total_memory()

    def available_memory(self, device_index: int | None = None) -> int:
        """Memory still obtainable, capped by the cgroup's headroom."""
        check_optional_index(device_index)
        return _host.available_memory()


@implements(MemoryStatsAPI, AccumulatedStatsAPI)
class HostMemoryMixin(HostMemoryUsageMixin):
    """:class:`HostMemoryUsageMixin` and peaks: the kernel's high-water mark where it has
    one (see ``accel._host.ProcessMemory``).
    """

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """The peak RSS (the kernel's high-water mark where it has one)."""
        check_optional_index(device_index)
        return _host.process_memory.peak()

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """Same as :meth:`max_memory_allocated`."""
        return self.max_memory_allocated(device_index)

    def memory_stats(self, device_index: int | None = None) -> dict[str, int]:
        """``allocated_bytes.all.current``/``.peak`` and ``reserved_bytes.all.current``/``.peak``:
        the RSS and its peak."""
        check_optional_index(device_index)
        current = _host.process_memory.rss()
        peak = _host.process_memory.peak()
        return {
            "allocated_bytes.all.current": current,
            "allocated_bytes.all.peak": peak,
            "reserved_bytes.all.current": current,
            "reserved_bytes.all.peak": peak,
        }

    def reset_accumulated_memory_stats(self, device_index: int | None = None) -> None:
        """Nothing to do: the host reports no counters that only grow (``memory_stats()`` holds
        current values and peaks), so after this call none is non-zero."""
        check_optional_index(device_index)

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Restarts the peaks from the current RSS."""
        check_optional_index(device_index)
        _host.process_memory.reset_peak()


class _TorchMemoryIndex:
    device_type: ClassVar[str]

    def _index(self, device_index: int | None) -> int:
        index = check_optional_index(device_index)
        return int(device_module(self.device_type).current_device()) if index is None else index


@implements(MemoryUsageAPI)
class TorchMemoryUsageMixin(_TorchMemoryIndex, MemoryInfoMixin):
    """Memory in use and sizes from a torch device type's allocator. Every size is in bytes."""

    def empty_cache(self) -> None:
        device_module(self.device_type).empty_cache()

    def memory_allocated(self, device_index: int | None = None) -> int:
        return int(device_module(self.device_type).memory_allocated(self._index(device_index)))

    def memory_reserved(self, device_index: int | None = None) -> int:
        return int(device_module(self.device_type).memory_reserved(self._index(device_index)))

    def total_memory(self, device_index: int | None = None) -> int:
        """From ``torch.<type>.get_device_properties``, else ``mem_get_info``'s total."""
        return module_total_memory(device_module(self.device_type), self._index(device_index))

    def available_memory(self, device_index: int | None = None) -> int:
        """The free size ``torch.<type>.mem_get_info`` reports."""
        module = device_module(self.device_type)
        free, _total = module.mem_get_info(self._index(device_index))
        return int(free)


@implements(MemoryStatsAPI, AccumulatedStatsAPI)
class TorchMemoryStatsMixin(_TorchMemoryIndex):
    """Peak statistics of a torch device type's allocator. Every size is in bytes."""

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        return int(device_module(self.device_type).max_memory_allocated(self._index(device_index)))

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        return int(device_module(self.device_type).max_memory_reserved(self._index(device_index)))

    def memory_stats(self, device_index: int | None = None) -> dict[str, int]:
        """Entries whose value is not an ``int`` are left out."""
        stats = device_module(self.device_type).memory_stats(self._index(device_index))
        return {str(key): int(value) for key, value in stats.items() if isinstance(value, int)}

    def reset_accumulated_memory_stats(self, device_index: int | None = None) -> None:
        device_module(self.device_type).reset_accumulated_memory_stats(self._index(device_index))

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        device_module(self.device_type).reset_peak_memory_stats(self._index(device_index))


def accelerator_keeps_peaks(device_type: str) -> bool:
    """Whether ``torch.accelerator``'s allocator-generic statistics answer for a device type
    here: it is torch's current accelerator and ``memory_stats()`` reports peaks (torch
    2.13 does for MPS; older releases raise there, or have no such function).

    Args:
        device_type: The torch device type (``"mps"``).
    """
    import torch

    generic = getattr(torch, "accelerator", None)
    current = getattr(generic, "current_accelerator", None)
    stats = getattr(generic, "memory_stats", None)
    if current is None or stats is None:
        return False
    try:
        device = current()
        if device is None or device.type != device_type:
            return False
        if not stats(0):
            # torch answers {} until the device's allocator is first used: use it.
            _touch_allocator(device_type)
        return "allocated_bytes.all.peak" in stats(0)
    except Exception as error:  # the device's allocator keeps no statistics torch can read
        _log.debug("torch.accelerator.memory_stats() for %s: %r; no peaks", device_type, error)
        return False


def _touch_allocator(device_type: str) -> None:
    """Allocate on ``device_type`` once, so that its allocator exists."""
    import torch

    torch.empty(1, device=device_type)


def _generic() -> types.ModuleType:
    import torch  # not at import time: torch loads on first use

    return torch.accelerator


@implements(MemoryStatsAPI, AccumulatedStatsAPI)
class AcceleratorMemoryStatsMixin:
    """Peak statistics from ``torch.accelerator``'s allocator-generic functions, for a
    device type whose own module has none (MPS). Every size is in bytes."""

    def max_memory_allocated(self: CountedDevices, device_index: int | None = None) -> int:
        check_counted_index(self, device_index)
        return int(_generic().max_memory_allocated(device_index))

    def max_memory_reserved(self: CountedDevices, device_index: int | None = None) -> int:
        check_counted_index(self, device_index)
        return int(_generic().max_memory_reserved(device_index))

    def memory_stats(self: CountedDevices, device_index: int | None = None) -> dict[str, int]:
        """Entries whose value is not an ``int`` are left out."""
        check_counted_index(self, device_index)
        stats = _generic().memory_stats(device_index)
        return {str(key): int(value) for key, value in stats.items() if isinstance(value, int)}

    def reset_accumulated_memory_stats(
        self: CountedDevices, device_index: int | None = None
    ) -> None:
        check_counted_index(self, device_index)
        _generic().reset_accumulated_memory_stats(device_index)

    def reset_peak_memory_stats(self: CountedDevices, device_index: int | None = None) -> None:
        check_counted_index(self, device_index)
        _generic().reset_peak_memory_stats(device_index)


class TorchMemoryMixin(TorchMemoryUsageMixin, TorchMemoryStatsMixin):
    """Allocator statistics of a torch device type: usage and peaks. Every size is in bytes."""
