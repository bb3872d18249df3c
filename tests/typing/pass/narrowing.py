"""Capability checks narrow the accelerator's type; these lines must type-check cleanly."""

from __future__ import annotations

import torch

from accel import Accelerator, get_accelerator
from accel.backends.cpu import CPUAccelerator
from accel.protocols import (
    GraphAPI,
    OpBuilderAPI,
    ProfilerAPI,
    StreamAPI,
    supports_graphs,
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
