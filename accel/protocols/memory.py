"""MemoryAPI: how much device memory is used, reserved, free, and its peaks."""

from __future__ import annotations

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol


@fast_protocol
@runtime_checkable
class MemoryAPI(Protocol):
    """Memory accounting of one device (default: the current one). Every size is in bytes.

    ``max_*`` values are peaks since the process started or since the last
    :meth:`reset_peak_memory_stats`, and are never below the matching current value.
    """

    def empty_cache(self) -> None:
        """Return memory cached by the allocator to the system."""
        ...

    def memory_allocated(self, device_index: int | None = None) -> int:
        """Bytes currently occupied by tensors."""
        ...

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """Peak of :meth:`memory_allocated`."""
        ...

    def memory_reserved(self, device_index: int | None = None) -> int:
        """Bytes currently held by the allocator, used or cached."""
        ...

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """Peak of :meth:`memory_reserved`."""
        ...

    def memory_stats(self, device_index: int | None = None) -> dict[str, int]:
        """Allocator statistics under torch's key names (e.g. ``"allocated_bytes.all.peak"``)."""
        ...

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Start the ``max_*`` peaks again from the current values."""
        ...

    def total_memory(self, device_index: int | None = None) -> int:
        """Total memory of the device."""
        ...

    def available_memory(self, device_index: int | None = None) -> int:
        """Memory that a new allocation could still obtain."""
        ...


@fast_protocol
@runtime_checkable
class AccumulatedStatsAPI(Protocol):
    """Resetting the allocator's counters that only grow (since API version 2).

    Optional, so that backends written before it stay :class:`~accel.Accelerator` backends:
    ``accel.reset_accumulated_memory_stats()`` works with every backend.
    """

    def reset_accumulated_memory_stats(self, device_index: int | None = None) -> None:
        """Zero the counters that only grow (allocation and free totals) in ``memory_stats``."""
        ...
