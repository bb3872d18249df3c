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
        """Bytes currently occupied by tensors.

        Args:
            device_index: The device; ``None`` for the current one.

        Returns:
            A size in bytes.

        Raises:
            TypeError: ``device_index`` is not an ``int``.
            ValueError: ``device_index`` is negative.
        """
        ...

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """Peak of :meth:`memory_allocated`.

        Args:
            device_index: The device; ``None`` for the current one.

        Returns:
            A size in bytes, never below :meth:`memory_allocated`.

        Raises:
            TypeError: ``device_index`` is not an ``int``.
            ValueError: ``device_index`` is negative.
        """
        ...

    def memory_reserved(self, device_index: int | None = None) -> int:
        """Bytes currently held by the allocator, used or cached.

        Args:
            device_index: The device; ``None`` for the current one.

        Returns:
            A size in bytes.

        Raises:
            TypeError: ``device_index`` is not an ``int``.
            ValueError: ``device_index`` is negative.
        """
        ...

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """Peak of :meth:`memory_reserved`.

        Args:
            device_index: The device; ``None`` for the current one.

        Returns:
            A size in bytes, never below :meth:`memory_reserved`.

        Raises:
            TypeError: ``device_index`` is not an ``int``.
            ValueError: ``device_index`` is negative.
        """
        ...

    def memory_stats(self, device_index: int | None = None) -> dict[str, int]:
        """Allocator statistics under torch's key names.

        Args:
            device_index: The device; ``None`` for the current one.

        Returns:
            Integer statistics by key, e.g. ``"allocated_bytes.all.peak"``.

        Raises:
            TypeError: ``device_index`` is not an ``int``.
            ValueError: ``device_index`` is negative.
        """
        ...

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Start the ``max_*`` peaks again from the current values.

        Args:
            device_index: The device; ``None`` for the current one.

        Raises:
            TypeError: ``device_index`` is not an ``int``.
            ValueError: ``device_index`` is negative.
        """
        ...

    def total_memory(self, device_index: int | None = None) -> int:
        """Total memory of a device.

        Args:
            device_index: The device; ``None`` for the current one.

        Returns:
            A size in bytes.

        Raises:
            TypeError: ``device_index`` is not an ``int``.
            ValueError: ``device_index`` is negative.
        """
        ...

    def available_memory(self, device_index: int | None = None) -> int:
        """Memory that a new allocation could still obtain.

        Args:
            device_index: The device; ``None`` for the current one.

        Returns:
            A size in bytes.

        Raises:
            TypeError: ``device_index`` is not an ``int``.
            ValueError: ``device_index`` is negative.
        """
        ...


@fast_protocol
@runtime_checkable
class AccumulatedStatsAPI(Protocol):
    """Resetting the allocator's counters that only grow (since API version 2).

    Optional, so that backends written before it stay :class:`~accel.Accelerator` backends:
    ``accel.reset_accumulated_memory_stats()`` works with every backend.
    """

    def reset_accumulated_memory_stats(self, device_index: int | None = None) -> None:
        """Zero the counters in ``memory_stats`` that only grow (allocation and free totals).

        Args:
            device_index: The device; ``None`` for the current one.

        Raises:
            TypeError: ``device_index`` is not an ``int``.
            ValueError: ``device_index`` is negative.
        """
        ...
