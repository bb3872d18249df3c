"""Capability protocols: one small ``typing.Protocol`` per thing an accelerator can do.

``isinstance(acc, GraphAPI)`` is the honest capability check (constant time, see
``_fast``), and mypy and pyright narrow on it.
"""

from accel.protocols.accelerator import (
    API_VERSION,
    CORE_PROTOCOLS,
    OPTIONAL_PROTOCOLS,
    Accelerator,
    GraphAccelerator,
    OpBuilderAccelerator,
    ProfilerAccelerator,
    StreamAccelerator,
    missing_members,
    supports_graphs,
    supports_op_builders,
    supports_profiler,
    supports_streams,
)
from accel.protocols.device import DeviceAPI, DeviceLike, DeviceProperties, DevicePropertiesAPI
from accel.protocols.dtype import DTypeAPI
from accel.protocols.graph import Graph, GraphAPI
from accel.protocols.memory import AccumulatedStatsAPI, MemoryAPI
from accel.protocols.op_builder import OpBuilder, OpBuilderAPI
from accel.protocols.profiler import ProfilerAPI
from accel.protocols.rng import RNGAPI, ForkRNGAPI
from accel.protocols.runtime import RuntimeAPI
from accel.protocols.stream import StreamAPI
from accel.protocols.tensor import TensorAPI

__all__ = [
    "API_VERSION",
    "CORE_PROTOCOLS",
    "OPTIONAL_PROTOCOLS",
    "RNGAPI",
    "Accelerator",
    "AccumulatedStatsAPI",
    "DTypeAPI",
    "DeviceAPI",
    "DeviceLike",
    "DeviceProperties",
    "DevicePropertiesAPI",
    "ForkRNGAPI",
    "Graph",
    "GraphAPI",
    "GraphAccelerator",
    "MemoryAPI",
    "OpBuilder",
    "OpBuilderAPI",
    "OpBuilderAccelerator",
    "ProfilerAPI",
    "ProfilerAccelerator",
    "RuntimeAPI",
    "StreamAPI",
    "StreamAccelerator",
    "TensorAPI",
    "missing_members",
    "supports_graphs",
    "supports_op_builders",
    "supports_profiler",
    "supports_streams",
]
