"""Profiler ranges as NVTX ranges (visible in Nsight Systems)."""

from __future__ import annotations

import threading

import torch

from accel._checks import check_str


class _Depth(threading.local):
    def __init__(self) -> None:
        self.open = 0


_depth = _Depth()


class NVTXProfilerMixin:
    """``range_push``/``range_pop`` through ``torch.cuda.nvtx``.

    NVTX itself cannot report an unbalanced pop unless a profiler is attached (it then
    returns a "not tracking" code), so the depth is counted here, per thread.
    """

    def range_push(self, msg: str) -> None:
        """Open an NVTX range named ``msg``."""
        torch.cuda.nvtx.range_push(check_str(msg, "msg"))  # type: ignore[no-untyped-call]  # pyright: ignore[reportUnknownMemberType]
        _depth.open += 1

    def range_pop(self) -> None:
        """Close the innermost NVTX range; ``RuntimeError`` when none is open."""
        if _depth.open == 0:
            raise RuntimeError("range_pop() called with no open range on this thread")
        torch.cuda.nvtx.range_pop()  # type: ignore[no-untyped-call]
        _depth.open -= 1
