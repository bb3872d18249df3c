"""Every built-in backend satisfies the core protocol and exactly the capabilities it claims."""

from __future__ import annotations

from accel import Accelerator
from accel.backends.cuda import CUDAAccelerator
from accel.backends.devices import XPUAccelerator
from accel.protocols import (
    DeviceProperties,
    GraphAccelerator,
    ProfilerAccelerator,
    StreamAccelerator,
)

cuda_streams: StreamAccelerator = CUDAAccelerator()
cuda_graphs: GraphAccelerator = CUDAAccelerator()
cuda_ranges: ProfilerAccelerator = CUDAAccelerator()
# Discovered devices promise the core statically; streams and graphs are checked at run time.
xpu: Accelerator = XPUAccelerator()


def uses_the_device_generic_api(acc: Accelerator) -> int:
    """set_device takes what torch takes; the context managers and the record are typed."""
    acc.set_device("cpu:0")
    acc.set_device(acc.device(0))
    with acc.device_index(0), acc.fork_rng(devices=[0]):
        properties: DeviceProperties = acc.get_device_properties()
    acc.reset_accumulated_memory_stats()
    capability: tuple[int, int] | None = properties.compute_capability
    return properties.total_memory + (capability[0] if capability else 0)
