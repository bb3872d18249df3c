"""Apple GPUs through ``torch.mps``: one device, memory in use but no peak statistics.

``torch.mps`` has no device selection (there is one GPU), no ``initial_seed`` or
``manual_seed_all``, and its allocator reports current sizes only
(``current_allocated_memory``, ``driver_allocated_memory``, ``recommended_max_memory``).
So this backend is a :class:`~accel.protocols.CoreAccelerator` without
:class:`~accel.protocols.MemoryStatsAPI`, without streams (the module has events only) and
without graphs, each said by a No-mixin; seeding goes through the device's one generator.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from accel import _host
from accel._device_module import device_module
from accel._validate import check_index, check_optional_index
from accel.backends.base import Availability
from accel.backends.torch_device import TorchDeviceCommon, probe_device_module
from accel.mixins import (
    DeviceNamingMixin,
    GeneratorRNGMixin,
    MemoryInfoMixin,
    NoGraphMixin,
    NoMemoryStatsMixin,
    NoStreamMixin,
    RecordFunctionProfilerMixin,
    SingleDeviceMixin,
)
from accel.mixins.device import check_below_count
from accel.protocols._contract import implements
from accel.protocols.memory import MemoryUsageAPI
from accel.protocols.rng import RNGAPI

# What the backend calls on torch.mps; a module without one of them cannot back it.
MPS_MODULE_FUNCTIONS = (
    "device_count", "synchronize", "is_available", "_get_default_mps_generator",
    "current_allocated_memory", "driver_allocated_memory", "recommended_max_memory",
    "empty_cache",
)  # fmt: skip


@implements(RNGAPI, MemoryUsageAPI)
class MPSDeviceMixin(SingleDeviceMixin):
    """The one device's generator and memory, with every index checked against the count."""

    def _checked(self, device_index: int | None) -> None:
        index = check_optional_index(device_index)
        if index is not None:
            check_below_count(index, self.device_count(), self.device_type)

    def default_generator(self, device_index: int) -> torch.Generator:
        """``torch.mps``'s default generator."""
        check_below_count(check_index(device_index), self.device_count(), self.device_type)
        generator: torch.Generator = device_module(self.device_type)._get_default_mps_generator()
        return generator

    def empty_cache(self) -> None:
        """``torch.mps.empty_cache``."""
        device_module(self.device_type).empty_cache()

    def memory_allocated(self, device_index: int | None = None) -> int:
        """``torch.mps.current_allocated_memory``."""
        self._checked(device_index)
        return int(device_module(self.device_type).current_allocated_memory())

    def memory_reserved(self, device_index: int | None = None) -> int:
        """What the Metal driver holds for this process, tensors and caches
        (``torch.mps.driver_allocated_memory``)."""
        self._checked(device_index)
        return int(device_module(self.device_type).driver_allocated_memory())

    def total_memory(self, device_index: int | None = None) -> int:
        """The GPU's working-set budget (``torch.mps.recommended_max_memory``): the unified memory
        Metal recommends a process keep on the GPU."""
        self._checked(device_index)
        return int(device_module(self.device_type).recommended_max_memory())

    def available_memory(self, device_index: int | None = None) -> int:
        """What is left of the budget after what the driver holds, and no more than the host has
        free (the memory is the host's)."""
        budget = self.total_memory(device_index) - self.memory_reserved(device_index)
        return max(0, min(budget, _host.available_memory()))


class MPSAccelerator(
    NoStreamMixin,
    NoGraphMixin,
    NoMemoryStatsMixin,
    DeviceNamingMixin,
    MPSDeviceMixin,
    GeneratorRNGMixin,
    MemoryInfoMixin,
    TorchDeviceCommon,
    RecordFunctionProfilerMixin,
):
    """Apple GPUs (``torch.mps``): a :class:`~accel.protocols.CoreAccelerator` with memory
    in use and sizes, but no peak statistics, streams or graphs.

    Not yet run on Apple hardware by accel's tests: they drive it with a stand-in for
    ``torch.mps`` that has exactly torch 2.13's functions.
    """

    name: ClassVar[str] = "mps"
    priority: ClassVar[int] = 70
    device_type: ClassVar[str] = "mps"
    visible_devices_env_names: ClassVar[tuple[str, ...]] = ()
    exported_env_prefixes: ClassVar[tuple[str, ...]] = ("PYTORCH_MPS",)

    @classmethod
    def probe(cls) -> Availability:
        """Available when ``torch.mps`` has what the backend calls and sees the GPU."""
        return probe_device_module(cls.device_type, MPS_MODULE_FUNCTIONS)
