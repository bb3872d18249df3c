"""Reusable implementations that backends compose; each mixin serves one capability.

Mixins are parametrised by data (``device_type``, environment variable names), never by a
backend's name, so any backend can reuse them.
"""

from accel.mixins.compile_backend import CompileBackendMixin
from accel.mixins.device_naming import DeviceNamingMixin
from accel.mixins.dtype_list import DTypeListMixin
from accel.mixins.generator_rng import GeneratorRNGMixin
from accel.mixins.host_memory import HostMemoryMixin
from accel.mixins.host_rng import HostRNGMixin
from accel.mixins.host_staging import HostStagingMixin
from accel.mixins.nvtx_profiler import NVTXProfilerMixin
from accel.mixins.op_builder_table import OpBuilderTableMixin
from accel.mixins.pinned_host import PinnedHostMemoryMixin
from accel.mixins.record_function_profiler import RecordFunctionProfilerMixin
from accel.mixins.runtime_env import RuntimeEnvMixin
from accel.mixins.synchronous import NoGraphMixin, NoStreamMixin
from accel.mixins.tensor_placement import TensorPlacementMixin
from accel.mixins.torch_device import TorchDeviceMixin
from accel.mixins.torch_dtype import TorchDTypeMixin
from accel.mixins.torch_graphs import TorchGraphMixin
from accel.mixins.torch_memory import TorchMemoryMixin
from accel.mixins.torch_rng import TorchRNGMixin
from accel.mixins.torch_runtime import TorchRuntimeMixin
from accel.mixins.torch_streams import TorchStreamMixin

__all__ = [
    "CompileBackendMixin",
    "DTypeListMixin",
    "DeviceNamingMixin",
    "GeneratorRNGMixin",
    "HostMemoryMixin",
    "HostRNGMixin",
    "HostStagingMixin",
    "NVTXProfilerMixin",
    "NoGraphMixin",
    "NoStreamMixin",
    "OpBuilderTableMixin",
    "PinnedHostMemoryMixin",
    "RecordFunctionProfilerMixin",
    "RuntimeEnvMixin",
    "TensorPlacementMixin",
    "TorchDTypeMixin",
    "TorchDeviceMixin",
    "TorchGraphMixin",
    "TorchMemoryMixin",
    "TorchRNGMixin",
    "TorchRuntimeMixin",
    "TorchStreamMixin",
]
