"""Memory capabilities: current usage and sizes, peak statistics, and their union MemoryAPI.

Every backend reports how much memory is in use (:class:`MemoryUsageAPI`); peak statistics
(:class:`MemoryStatsAPI`) need an allocator that keeps them, which some devices' runtimes
do not (``torch.mps`` before torch kept them in its generic statistics). :class:`MemoryAPI`
is both, as in the first release.
"""

from __future__ import annotations

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol


@fast_protocol
@runtime_checkable
class MemoryUsageAPI(Protocol):
    """Memory in use on one device (default: the current one), and its size. Every size is
    in bytes."""

    def empty_cache(self) -> None:
        """Return memory cached by the allocator to the system."""
        ...

    def memory_allocated(self, device_index: int | None = None) -> int:
        """Bytes currently occupied by tensors."""
        ...

    def memory_reserved(self, device_index: int | None = None) -> int:
        """Bytes currently held by the allocator, used or cached."""
        ...

    def total_memory(self, device_index: int | None = None) -> int:
        """Total memory of a device, in bytes."""
        ...

    def available_memory(self, device_index: int | None = None) -> int:
        """Bytes that a new allocation could still obtain."""
        ...


@fast_protocol
@runtime_checkable
class MemoryStatsAPI(Protocol):
    """Peak memory statistics of one device's allocator (default: the current device).

    ``max_*`` values are peaks since the process started or since the last
    :meth:`reset_peak_memory_stats`, and are never below the matching current value of
    :class:`MemoryUsageAPI`. Optional since API version 3: a device whose runtime keeps no
    peaks (MPS on a torch that keeps none for it) declares these members absent
    (``accel.mixins.NoMemoryStatsMixin``).
    """

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """Peak of :meth:`memory_allocated`.

        Returns:
            A size in bytes, never below :meth:`memory_allocated`.
        """
        ...

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """Peak of :meth:`memory_reserved`.

        Returns:
            A size in bytes, never below :meth:`memory_reserved`.
        """
        ...

    def memory_stats(self, device_index: int | None = None) -> dict[str, int]:
        """Allocator statistics under torch's key names.

        Returns:
            Integer statistics by key, e.g. ``"allocated_bytes.all.peak"``.
        """
        ...

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Start the ``max_*`` peaks again from the current values."""
        ...


@fast_protocol
@runtime_checkable
class MemoryAPI(MemoryUsageAPI, MemoryStatsAPI, Protocol):
    """Memory accounting of one device: current usage, sizes and peaks (the first release's
    memory protocol, now the union of :class:`MemoryUsageAPI` and :class:`MemoryStatsAPI`)."""


@fast_protocol
@runtime_checkable
class MemoryInfoAPI(Protocol):
    """Free and total memory in one call, as ``torch.accelerator.get_memory_info`` answers
    (since API version 3).

    Optional: ``accel.get_memory_info()`` answers for every backend, from this member where
    a backend has it and from ``available_memory``/``total_memory`` otherwise.
    """

    def get_memory_info(self, device_index: int | None = None) -> tuple[int, int]:
        """Free and total memory of a device.

        Returns:
            ``(free, total)`` in bytes; ``free`` is what a new allocation could still
            obtain (``available_memory()``), ``total`` the device's size (``total_memory()``).
        """
        ...


@fast_protocol
@runtime_checkable
class HostCacheAPI(Protocol):
    """A cache of page-locked host memory that can be handed back (since API version 3)."""

    def empty_host_cache(self) -> None:
        """Release the page-locked (pinned) host memory that the device runtime caches and no
        tensor uses, as ``torch.accelerator.empty_host_cache`` does."""
        ...


@fast_protocol
@runtime_checkable
class AccumulatedStatsAPI(Protocol):
    """Resetting the allocator's counters that only grow (since API version 2).

    Optional, so that backends written before it stay :class:`~accel.Accelerator` backends;
    ``accel.reset_accumulated_memory_stats()`` raises ``CapabilityError`` for those (accel
    cannot know which of their counters only grow).
    """

    def reset_accumulated_memory_stats(self, device_index: int | None = None) -> None:
        """Zero the counters in ``memory_stats`` that only grow (allocation and free totals)."""
        ...
