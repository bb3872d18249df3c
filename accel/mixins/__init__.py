"""Reusable implementations that backends compose; each mixin serves one capability.

One module per protocol module, with the same name: ``accel.mixins.rng`` holds every
implementation of ``accel.protocols.rng.RNGAPI`` (and ``accel.mixins.stream`` /
``accel.mixins.graph`` the No-markers that switch a capability off). Mixins are
parametrised by data (``device_type``, environment variable names), never by a backend's
name, so any backend can reuse them. Import them from here, with ``check_device`` (an
``int``, ``"<type>:<i>"`` or ``torch.device`` -> index), which a backend's own
``set_device`` needs.
"""

from accel._validate import check_device
from accel.mixins.device import DeviceNamingMixin, SingleDeviceMixin, TorchDeviceMixin
from accel.mixins.dtype import DeviceCapabilityMixin, DTypeListMixin, TorchDTypeMixin
from accel.mixins.graph import NoGraphMixin, TorchGraphMixin
from accel.mixins.memory import (
    AcceleratorMemoryStatsMixin,
    HostMemoryMixin,
    HostMemoryUsageMixin,
    MemoryInfoMixin,
    NoMemoryStatsMixin,
    TorchMemoryMixin,
    TorchMemoryStatsMixin,
    TorchMemoryUsageMixin,
)
from accel.mixins.op_builder import OpBuilderTableMixin
from accel.mixins.profiler import NVTXProfilerMixin, RecordFunctionProfilerMixin
from accel.mixins.rng import GeneratorRNGMixin, HostRNGMixin, TorchRNGMixin
from accel.mixins.runtime import CompileBackendMixin, RuntimeEnvMixin, TorchRuntimeMixin
from accel.mixins.stream import NoStreamMixin, TorchStreamMixin
from accel.mixins.tensor import (
    HostStagingMixin,
    PinnedHostMemoryMixin,
    TensorPlacementMixin,
    TorchHostCacheMixin,
)

__all__ = [
    "AcceleratorMemoryStatsMixin",
    "CompileBackendMixin",
    "DTypeListMixin",
    "DeviceCapabilityMixin",
    "DeviceNamingMixin",
    "GeneratorRNGMixin",
    "HostMemoryMixin",
    "HostMemoryUsageMixin",
    "HostRNGMixin",
    "HostStagingMixin",
    "MemoryInfoMixin",
    "NVTXProfilerMixin",
    "NoGraphMixin",
    "NoMemoryStatsMixin",
    "NoStreamMixin",
    "OpBuilderTableMixin",
    "PinnedHostMemoryMixin",
    "RecordFunctionProfilerMixin",
    "RuntimeEnvMixin",
    "SingleDeviceMixin",
    "TensorPlacementMixin",
    "TorchDTypeMixin",
    "TorchDeviceMixin",
    "TorchGraphMixin",
    "TorchHostCacheMixin",
    "TorchMemoryMixin",
    "TorchMemoryStatsMixin",
    "TorchMemoryUsageMixin",
    "TorchRNGMixin",
    "TorchRuntimeMixin",
    "TorchStreamMixin",
    "check_device",
]
