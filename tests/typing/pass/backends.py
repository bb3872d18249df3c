"""Every built-in backend satisfies the core protocol and exactly the capabilities it claims."""

from __future__ import annotations

from accel import Accelerator
from accel.backends.cuda import CUDAAccelerator
from accel.backends.devices import XPUAccelerator
from accel.protocols import (
    GraphAccelerator,
    ProfilerAccelerator,
    StreamAccelerator,
)

cuda_streams: StreamAccelerator = CUDAAccelerator()
cuda_graphs: GraphAccelerator = CUDAAccelerator()
cuda_ranges: ProfilerAccelerator = CUDAAccelerator()
# Discovered devices promise the core statically; streams and graphs are checked at run time.
xpu: Accelerator = XPUAccelerator()
