"""Capability protocols: one small ``typing.Protocol`` per thing an accelerator can do.

``isinstance(acc, GraphAPI)`` is the honest capability check (constant time, see
``_fast``), and mypy and pyright narrow on it.

Device indices, written once for every member: a ``device_index`` is an ``int`` counted
from 0, and ``None`` where the parameter is optional means the current device (where it
means something else, the member says so). A member raises ``TypeError`` when
``device_index`` is not an ``int`` and ``ValueError`` when it is negative, besides what it
lists itself.
"""

from accel.protocols._contract import implements
from accel.protocols._unsupported import CapabilityError
from accel.protocols.accelerator import (
    API_VERSION,
    CAPABILITIES,
    CORE_PROTOCOLS,
    OPTIONAL_PROTOCOLS,
    Accelerator,
    CoreAccelerator,
    GraphAccelerator,
    OpBuilderAccelerator,
    ProfilerAccelerator,
    StreamAccelerator,
    missing_members,
    supports_graphs,
    supports_memory_stats,
    supports_op_builders,
    supports_profiler,
    supports_streams,
)
from accel.protocols.device import (
    DeviceAPI,
    DeviceCapabilityAPI,
    DeviceLike,
    DeviceProperties,
    DevicePropertiesAPI,
)
from accel.protocols.dtype import DTypeAPI
from accel.protocols.graph import CaptureErrorMode, CaptureGraph, Graph, GraphAPI, GraphObjectAPI
from accel.protocols.memory import (
    AccumulatedStatsAPI,
    HostCacheAPI,
    MemoryAPI,
    MemoryInfoAPI,
    MemoryStatsAPI,
    MemoryUsageAPI,
)
from accel.protocols.op_builder import OpBuilder, OpBuilderAPI
from accel.protocols.profiler import ProfilerAPI
from accel.protocols.rng import RNGAPI, ForkRNGAPI
from accel.protocols.runtime import RuntimeAPI
from accel.protocols.stream import SetStreamAPI, StreamAPI
from accel.protocols.tensor import TensorAPI

__all__ = [
    "API_VERSION",
    "CAPABILITIES",
    "CORE_PROTOCOLS",
    "OPTIONAL_PROTOCOLS",
    "RNGAPI",
    "Accelerator",
    "AccumulatedStatsAPI",
    "CapabilityError",
    "CaptureErrorMode",
    "CaptureGraph",
    "CoreAccelerator",
    "DTypeAPI",
    "DeviceAPI",
    "DeviceCapabilityAPI",
    "DeviceLike",
    "DeviceProperties",
    "DevicePropertiesAPI",
    "ForkRNGAPI",
    "Graph",
    "GraphAPI",
    "GraphAccelerator",
    "GraphObjectAPI",
    "HostCacheAPI",
    "MemoryAPI",
    "MemoryInfoAPI",
    "MemoryStatsAPI",
    "MemoryUsageAPI",
    "OpBuilder",
    "OpBuilderAPI",
    "OpBuilderAccelerator",
    "ProfilerAPI",
    "ProfilerAccelerator",
    "RuntimeAPI",
    "SetStreamAPI",
    "StreamAPI",
    "StreamAccelerator",
    "TensorAPI",
    "implements",
    "missing_members",
    "supports_graphs",
    "supports_memory_stats",
    "supports_op_builders",
    "supports_profiler",
    "supports_streams",
]
