"""MemoryAPI through the device module's caching-allocator functions."""

from __future__ import annotations

from typing import ClassVar

from accel._checks import check_optional_index
from accel.mixins.torch_device import device_module


class TorchMemoryMixin:
    """Allocator statistics of a torch device type. Every size is in bytes."""

    device_type: ClassVar[str]

    def _index(self, device_index: int | None) -> int:
        index = check_optional_index(device_index)
        return int(device_module(self.device_type).current_device()) if index is None else index

    def empty_cache(self) -> None:
        """Release cached, unused blocks of the allocator to the device."""
        device_module(self.device_type).empty_cache()

    def memory_allocated(self, device_index: int | None = None) -> int:
        """Bytes occupied by tensors."""
        return int(device_module(self.device_type).memory_allocated(self._index(device_index)))

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """Peak of :meth:`memory_allocated`."""
        return int(device_module(self.device_type).max_memory_allocated(self._index(device_index)))

    def memory_reserved(self, device_index: int | None = None) -> int:
        """Bytes held by the caching allocator."""
        return int(device_module(self.device_type).memory_reserved(self._index(device_index)))

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """Peak of :meth:`memory_reserved`."""
        return int(device_module(self.device_type).max_memory_reserved(self._index(device_index)))

    def memory_stats(self, device_index: int | None = None) -> dict[str, int]:
        """The allocator's integer statistics under torch's key names."""
        stats = device_module(self.device_type).memory_stats(self._index(device_index))
        return {str(key): int(value) for key, value in stats.items() if isinstance(value, int)}

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Restart the peaks from the current values."""
        device_module(self.device_type).reset_peak_memory_stats(self._index(device_index))

    def total_memory(self, device_index: int | None = None) -> int:
        """Total memory of the device."""
        module = device_module(self.device_type)
        return int(module.get_device_properties(self._index(device_index)).total_memory)

    def available_memory(self, device_index: int | None = None) -> int:
        """Free memory the driver reports for the device."""
        module = device_module(self.device_type)
        free, _total = module.mem_get_info(self._index(device_index))
        return int(free)
