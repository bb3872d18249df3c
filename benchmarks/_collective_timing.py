"""Timing for the collective benchmarks (allreduce.py, reduce_scatter.py): imported from
beside them (a launcher puts the script's folder on sys.path)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch.distributed as dist


def seconds_per_call(call: Callable[[], object], iters: int) -> float:
    """Mean seconds of ``iters`` back-to-back calls, started together on every rank."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    return (time.perf_counter() - start) / iters
