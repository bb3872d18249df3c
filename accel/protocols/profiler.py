"""ProfilerAPI: named ranges that show up in the device's profiler timeline."""

from __future__ import annotations

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol


@fast_protocol
@runtime_checkable
class ProfilerAPI(Protocol):
    """Nested, named profiler ranges (NVTX on CUDA). Pushes and pops pair up per thread."""

    def range_push(self, msg: str) -> None:
        """Open a range named ``msg`` on this thread.

        Args:
            msg: The range's name in the profiler's timeline.

        Raises:
            TypeError: ``msg`` is not a ``str``.
        """
        ...

    def range_pop(self) -> None:
        """Close the innermost open range of this thread.

        Raises:
            RuntimeError: No range is open on this thread.
        """
        ...
