"""Asynchronous tensor I/O: CPU tensors to and from files at disk speed, nothing compiled.

    from accel.io import AsyncIO, aligned_empty

    buffer = aligned_empty(1 << 28, torch.uint8)           # O_DIRECT-ready
    with AsyncIO(block_size=8 << 20, queue_depth=8) as aio:
        request = aio.write(buffer, "/nvme/state.bin")     # a concurrent.futures.Future
        request.result()                                    # bytes written, or raises
        aio.read(buffer, "/nvme/state.bin")
        aio.wait()                                          # everything submitted

See docs/io.md for the design, the O_DIRECT rules and the measurements.
"""

from accel.io._buffers import aligned_empty
from accel.io._engine import ALIGNMENT, AsyncIO, IORequest

__all__ = ["ALIGNMENT", "AsyncIO", "IORequest", "aligned_empty"]
