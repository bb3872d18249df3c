"""Every built-in backend satisfies the core protocol and exactly the capabilities it claims."""

from __future__ import annotations

import accel
from accel import Accelerator
from accel.backends.cpu import CPUAccelerator
from accel.backends.cuda import CUDAAccelerator
from accel.backends.devices import XPUAccelerator
from accel.protocols import (
    AccumulatedStatsAPI,
    DeviceProperties,
    DevicePropertiesAPI,
    ForkRNGAPI,
    GraphAccelerator,
    ProfilerAccelerator,
    StreamAccelerator,
)

cuda_streams: StreamAccelerator = CUDAAccelerator()
cuda_graphs: GraphAccelerator = CUDAAccelerator()
cuda_ranges: ProfilerAccelerator = CUDAAccelerator()
# Discovered devices promise the core statically; streams and graphs are checked at run time.
xpu: Accelerator = XPUAccelerator()
# Members added after the first release are capabilities of their own, which they all have.
cpu_properties: DevicePropertiesAPI = CPUAccelerator()
cuda_fork: ForkRNGAPI = CUDAAccelerator()
xpu_counters: AccumulatedStatsAPI = XPUAccelerator()


def uses_the_device_generic_api(acc: Accelerator) -> int:
    """accel's functions take what torch takes, for every backend; the record is typed."""
    acc.set_device(0)
    accel.set_device("cpu:0", acc)
    accel.set_device(acc.device(0))
    with accel.device_index(0), accel.fork_rng(devices=[0]):
        properties: DeviceProperties = accel.get_device_properties()
    accel.reset_accumulated_memory_stats(accelerator=acc)
    capability: tuple[int, int] | None = properties.compute_capability
    return properties.total_memory + (capability[0] if capability else 0)


def uses_a_capability_after_narrowing(acc: Accelerator) -> int:
    """Members added later are reached after isinstance, which narrows."""
    if isinstance(acc, DevicePropertiesAPI):
        return acc.get_device_properties().total_memory
    return acc.total_memory()
