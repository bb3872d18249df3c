"""Capability checks narrow the accelerator's type; these lines must type-check cleanly."""

from __future__ import annotations

from typing import Any

import torch

import accel
from accel import Accelerator, get_accelerator
from accel.backends.cpu import CPUAccelerator
from accel.backends.mps import MPSAccelerator
from accel.protocols import (
    CaptureGraph,
    CoreAccelerator,
    GraphAPI,
    GraphObjectAPI,
    HostCacheAPI,
    MemoryInfoAPI,
    MemoryStatsAPI,
    MemoryUsageAPI,
    OpBuilderAPI,
    ProfilerAPI,
    SetStreamAPI,
    StreamAPI,
    supports_graphs,
    supports_memory_stats,
    supports_op_builders,
    supports_streams,
)


def run_step(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    acc = get_accelerator()
    batch = batch.to(acc.current_device_name())
    if isinstance(acc, GraphAPI):
        graph = acc.create_graph()
        with acc.capture_to_graph(graph):
            out: torch.Tensor = model(batch)
        acc.replay_graph(graph)
        return out
    result: torch.Tensor = model(batch)
    return result


def overlap_copy(acc: Accelerator, host: torch.Tensor) -> torch.Tensor:
    if supports_streams(acc):
        side = acc.Stream()
        with acc.stream(side):
            device_copy = host.to(acc.current_device_name(), non_blocking=True)
        acc.current_stream().wait_stream(side)
        return device_copy
    return host.to(acc.current_device_name())


def captured_on_core(acc: Accelerator) -> int:
    if supports_graphs(acc):
        acc.create_graph()
        return acc.device_count()  # the intersection keeps the core members
    if supports_op_builders(acc):
        return len(acc.op_builder_names())
    return 0


core: Accelerator = CPUAccelerator()
profiler: ProfilerAPI = CPUAccelerator()
builders: OpBuilderAPI = CPUAccelerator()
maybe_streams: Accelerator | StreamAPI = CPUAccelerator()


def peak_or_current(acc: CoreAccelerator) -> int:
    # A backend without peak statistics (MPS) is a CoreAccelerator; the check narrows.
    if isinstance(acc, MemoryStatsAPI):
        return acc.max_memory_allocated()
    if supports_memory_stats(acc):
        return acc.max_memory_reserved()  # narrowed to Accelerator: every member is there
    return acc.memory_allocated()


def newer_capabilities(acc: Accelerator) -> tuple[int, int]:
    if isinstance(acc, SetStreamAPI) and isinstance(acc, StreamAPI):
        acc.set_stream(acc.Stream())
    if isinstance(acc, GraphObjectAPI):
        graph = acc.Graph(keep_graph=True, capture_error_mode="thread_local")
        with graph:
            pass
        shared: CaptureGraph = acc.Graph(pool=graph.pool())
        shared.reset()
    if isinstance(acc, HostCacheAPI):
        acc.empty_host_cache()
    capability: dict[str, Any] = accel.get_device_capability(accelerator=acc)
    assert capability
    return accel.get_memory_info(accelerator=acc)


partial: CoreAccelerator = MPSAccelerator()
also_core: CoreAccelerator = CPUAccelerator()
usage: MemoryUsageAPI = MPSAccelerator()
info: MemoryInfoAPI = MPSAccelerator()
