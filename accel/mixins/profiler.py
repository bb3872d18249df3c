"""ProfilerAPI implementations: ``record_function`` ranges (host) and NVTX ranges (CUDA).

``record_function`` ranges appear in ``torch.profiler`` traces (and Kineto's Chrome
traces), which is where a host-side device's timeline lives; NVTX ranges appear in Nsight
Systems.
"""

from __future__ import annotations

import threading

from torch.autograd.profiler import record_function

from accel._torch_typed import nvtx_range_pop, nvtx_range_push
from accel._validate import check_str
from accel.protocols._contract import implements
from accel.protocols.profiler import ProfilerAPI


class _RangeStack(threading.local):
    def __init__(self) -> None:
        self.open: list[record_function] = []


_ranges = _RangeStack()


@implements(ProfilerAPI)
class RecordFunctionProfilerMixin:
    """``range_push``/``range_pop`` as nested ``record_function`` ranges, per thread."""

    def range_push(self, msg: str) -> None:
        """Opens a ``record_function`` range: ``msg`` names it in ``torch.profiler`` traces."""
        scope = record_function(check_str(msg, "msg"))
        scope.__enter__()  # type: ignore[no-untyped-call]
        _ranges.open.append(scope)

    def range_pop(self) -> None:
        if not _ranges.open:
            raise RuntimeError("range_pop() called with no open range on this thread")
        _ranges.open.pop().__exit__(None, None, None)


class _Depth(threading.local):
    def __init__(self) -> None:
        self.open = 0


_depth = _Depth()


@implements(ProfilerAPI)
class NVTXProfilerMixin:
    """``range_push``/``range_pop`` through ``torch.cuda.nvtx``.

    NVTX itself cannot report an unbalanced pop unless a profiler is attached (it then
    returns a "not tracking" code), so the depth is counted here, per thread.
    """

    def range_push(self, msg: str) -> None:
        """Opens an NVTX range (Nsight Systems' timeline)."""
        nvtx_range_push(check_str(msg, "msg"))
        _depth.open += 1

    def range_pop(self) -> None:
        if _depth.open == 0:
            raise RuntimeError("range_pop() called with no open range on this thread")
        nvtx_range_pop()
        _depth.open -= 1
