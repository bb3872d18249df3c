"""mypy --strict and basedpyright must each report an error on every line marked below."""

from __future__ import annotations

from accel import Accelerator, get_accelerator
from accel.backends.cpu import CPUAccelerator
from accel.backends.mps import MPSDeviceMixin
from accel.backends.torch_device import TorchDeviceCommon
from accel.mixins import (
    DeviceNamingMixin,
    GeneratorRNGMixin,
    MemoryInfoMixin,
    NoGraphMixin,
    NoMemoryStatsMixin,
    NoStreamMixin,
)
from accel.protocols import CoreAccelerator, GraphAPI, MemoryStatsAPI, StreamAPI

acc = get_accelerator()
acc.create_graph()  # expect-error: graphs are optional; narrow with isinstance first
acc.Stream()  # expect-error: streams are optional too

graphs: GraphAPI = CPUAccelerator()  # expect-error: the CPU has no graphs (None markers)
streams: StreamAPI = CPUAccelerator()  # expect-error: nor streams

cpu = CPUAccelerator()
cpu.create_graph()  # expect-error: the marker is None, not a method
cpu.Graph()  # expect-error: nor is the graph factory
cpu.set_stream(get_accelerator().current_stream())  # expect-error: nor set_stream (or streams)



class MPSWithoutPeaks(
    NoStreamMixin, NoGraphMixin, NoMemoryStatsMixin, DeviceNamingMixin, MPSDeviceMixin,
    GeneratorRNGMixin, MemoryInfoMixin, TorchDeviceCommon,
):  # fmt: skip
    """MPS on a torch that keeps no peaks for it: its mixins, the statistics absent."""

    device_type = "mps"


mps: Accelerator = MPSWithoutPeaks()  # expect-error: no peak memory statistics
peaks: MemoryStatsAPI = MPSWithoutPeaks()  # expect-error: its markers are None


def peak(core: CoreAccelerator) -> int:
    return core.max_memory_allocated()  # expect-error: narrow with isinstance first


class HalfBackend:
    def device_name(self, device_index: int | None = None) -> str:
        return "half"


incomplete: Accelerator = HalfBackend()  # expect-error: most members are missing
