"""Profiler ranges through ``torch.autograd.profiler.record_function``.

The ranges appear in ``torch.profiler`` traces (and in Kineto's Chrome traces), which is
where a host-side device's timeline lives.
"""

from __future__ import annotations

import threading

from torch.autograd.profiler import record_function

from accel._checks import check_str


class _RangeStack(threading.local):
    def __init__(self) -> None:
        self.open: list[record_function] = []


_ranges = _RangeStack()


class RecordFunctionProfilerMixin:
    """``range_push``/``range_pop`` as nested ``record_function`` ranges, per thread."""

    def range_push(self, msg: str) -> None:
        """Open a range named ``msg`` on this thread."""
        scope = record_function(check_str(msg, "msg"))
        scope.__enter__()  # type: ignore[no-untyped-call]
        _ranges.open.append(scope)

    def range_pop(self) -> None:
        """Close this thread's innermost open range; ``RuntimeError`` if none is open."""
        if not _ranges.open:
            raise RuntimeError("range_pop() called with no open range on this thread")
        _ranges.open.pop().__exit__(None, None, None)
