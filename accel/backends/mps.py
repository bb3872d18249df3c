"""Apple GPUs through ``torch.mps``: one device, with peak statistics where torch keeps them.

``torch.mps`` has no device selection (there is one GPU), no ``initial_seed`` or
``manual_seed_all``, and its own allocator functions report current sizes only
(``current_allocated_memory``, ``driver_allocated_memory``, ``recommended_max_memory``).
Peaks come from ``torch.accelerator``'s generic statistics, which torch 2.13 keeps for MPS;
on a torch whose MPS keeps none the backend is a :class:`~accel.protocols.CoreAccelerator`
without :class:`~accel.protocols.MemoryStatsAPI` (decided when it is made, by asking
torch). No streams (the module has events only) and no graphs, each said by a No-mixin;
seeding goes through the device's one generator. Work runs in order on the device's one
queue, so nothing needs ordering between streams: a synchronized device in DeepSpeed's
sense (its own MPS backend answers the same), though ``synchronize()`` still waits for the
queue.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from typing_extensions import override

from accel import _host
from accel._device_module import device_module
from accel._fork_safe import ForkSafeLock
from accel._validate import check_index
from accel.backends.base import Availability
from accel.backends.torch_device import TorchDeviceCommon, probe_device_module
from accel.mixins import (
    AcceleratorMemoryStatsMixin,
    DeviceNamingMixin,
    GeneratorRNGMixin,
    MemoryInfoMixin,
    NoGraphMixin,
    NoMemoryStatsMixin,
    NoStreamMixin,
    RecordFunctionProfilerMixin,
    SingleDeviceMixin,
)
from accel.mixins.device import check_below_count, check_counted_index
from accel.mixins.memory import accelerator_keeps_peaks
from accel.protocols._contract import implements
from accel.protocols.memory import MemoryStatsAPI, MemoryUsageAPI
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
        check_counted_index(self, device_index)
        return int(device_module(self.device_type).current_allocated_memory())

    def memory_reserved(self, device_index: int | None = None) -> int:
        """What the allocator holds, tensors and its cache: ``reserved_bytes.all.current`` of
        ``torch.accelerator``'s statistics where torch keeps them (so it never passes
        ``max_memory_reserved()``), else what the Metal driver holds for the process
        (``torch.mps.driver_allocated_memory``)."""
        check_counted_index(self, device_index)
        if isinstance(self, MemoryStatsAPI):  # not the variant without peaks
            return int(torch.accelerator.memory_reserved(device_index))
        return int(device_module(self.device_type).driver_allocated_memory())

    def total_memory(self, device_index: int | None = None) -> int:
        """The GPU's working-set budget (``torch.mps.recommended_max_memory``): the unified memory
        Metal recommends a process keep on the GPU."""
        check_counted_index(self, device_index)
        return int(device_module(self.device_type).recommended_max_memory())

    def available_memory(self, device_index: int | None = None) -> int:
        """What is left of the budget after what the Metal driver holds for the process
        (``torch.mps.driver_allocated_memory``), and no more than the host has free (the
        memory is the host's)."""
        check_counted_index(self, device_index)
        held = int(device_module(self.device_type).driver_allocated_memory())
        budget = self.total_memory(device_index) - held
        return max(0, min(budget, _host.available_memory()))


class MPSAccelerator(
    NoStreamMixin,
    NoGraphMixin,
    DeviceNamingMixin,
    MPSDeviceMixin,
    AcceleratorMemoryStatsMixin,
    GeneratorRNGMixin,
    MemoryInfoMixin,
    TorchDeviceCommon,
    RecordFunctionProfilerMixin,
):
    """Apple GPUs (``torch.mps``): no streams or graphs; peak memory statistics where the
    running torch keeps them for MPS, else an instance of a subclass that declares them
    absent (a :class:`~accel.protocols.CoreAccelerator`).

    Not yet run on Apple hardware by accel's tests: they drive it with a stand-in for
    ``torch.mps`` that has exactly torch 2.13's functions.
    """

    name: ClassVar[str] = "mps"
    priority: ClassVar[int] = 70
    device_type: ClassVar[str] = "mps"
    visible_devices_env_names: ClassVar[tuple[str, ...]] = ()
    exported_env_prefixes: ClassVar[tuple[str, ...]] = ("PYTORCH_MPS",)

    def __new__(cls, *args: Any, **kwargs: Any) -> MPSAccelerator:
        if issubclass(cls, NoMemoryStatsMixin) or accelerator_keeps_peaks(cls.device_type):
            return object.__new__(cls)
        instance: MPSAccelerator = object.__new__(_without_peaks(cls))
        return instance

    @classmethod
    def probe(cls) -> Availability:
        """Available when ``torch.mps`` has what the backend calls and sees the GPU."""
        return probe_device_module(cls.device_type, MPS_MODULE_FUNCTIONS)

    @override
    def __reduce__(self) -> tuple[object, ...]:
        # Pickled by the class the user chose (the variant is made at run time, with no
        # importable name); unpickled, it decides again where it is made.
        chosen: type[MPSAccelerator] = type(self).__dict__.get("_chosen", type(self))
        return chosen, (), self.__dict__

    @classmethod
    def instance_classes(cls) -> tuple[type[MPSAccelerator], ...]:
        """The classes an instance may be of: with peak statistics, and without."""
        return cls, _without_peaks(cls)


_variants: dict[type[MPSAccelerator], type[MPSAccelerator]] = {}
_variants_lock = ForkSafeLock()


def _without_peaks(cls: type[MPSAccelerator]) -> type[MPSAccelerator]:
    """``cls`` with the peak statistics declared absent, made once per class and named as
    ``cls`` (errors name the backend the user chose); ``cls`` itself if it declares them
    absent already."""
    if issubclass(cls, NoMemoryStatsMixin):
        return cls
    with _variants_lock:
        variant = _variants.get(cls)
        if variant is None:
            namespace = {
                "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                "__doc__": cls.__doc__, "_chosen": cls,
            }  # fmt: skip
            variant = _variants[cls] = type(cls.__name__, (NoMemoryStatsMixin, cls), namespace)
        return variant
