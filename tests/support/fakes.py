"""Stand-ins for hardware this machine does not have: NVML and torch device modules."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch


class FakeNVMLError(Exception):
    """pynvml.NVMLError."""


class FakeNVML:
    """pynvml with a few GPUs (by UUID), some split into MIG instances, and free memory."""

    NVMLError = FakeNVMLError

    def __init__(self, gpus: list[str], migs: dict[int, list[str]] | None = None) -> None:
        self.gpus = gpus
        self.migs = migs or {}

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[Any, ...]:
        if not 0 <= index < len(self.gpus):
            raise FakeNVMLError(f"no GPU {index}")
        return ("gpu", index)

    def nvmlDeviceGetUUID(self, handle: tuple[Any, ...]) -> str:
        if handle[0] == "gpu":
            return self.gpus[handle[1]]
        return self.migs[handle[1]][handle[2]]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: tuple[Any, ...]) -> int:
        if handle[1] not in self.migs:
            raise FakeNVMLError("not MIG capable")
        return len(self.migs[handle[1]]) + 1  # one empty slot

    def nvmlDeviceGetMigDeviceHandleByIndex(
        self, handle: tuple[Any, ...], slot: int
    ) -> tuple[Any, ...]:
        if slot >= len(self.migs[handle[1]]):
            raise FakeNVMLError("empty slot")
        return ("mig", handle[1], slot)

    def nvmlDeviceGetMemoryInfo(self, handle: tuple[Any, ...]) -> types.SimpleNamespace:
        # Free memory encodes the handle, so a test can tell which device was asked.
        base = 1000 * (handle[1] + 1)
        return types.SimpleNamespace(free=base + (handle[2] + 1 if handle[0] == "mig" else 0))


def fake_device_module(
    device_type: str, *, count: int = 2, streams: bool = True, without: tuple[str, ...] = ()
) -> types.ModuleType:
    """A torch device module with every core function, optionally without streams."""
    module = types.ModuleType(f"torch.{device_type}")
    state = {"current": 0}
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    generators = tuple(torch.Generator() for _ in range(count))

    def record(name: str, result: Callable[..., Any] = lambda *a, **k: None) -> Callable[..., Any]:
        def function(*args: Any, **kwargs: Any) -> Any:
            calls.append((name, args, kwargs))
            return result(*args, **kwargs)

        return function

    functions: dict[str, Callable[..., Any]] = {
        "device_count": lambda: count,
        "is_available": lambda: count > 0,
        "current_device": lambda: state["current"],
        "set_device": lambda index: state.__setitem__("current", index),
        "synchronize": record("synchronize"),
        "manual_seed": lambda seed: generators[state["current"]].manual_seed(seed),
        "manual_seed_all": lambda seed: [g.manual_seed(seed) for g in generators],
        "initial_seed": lambda: generators[state["current"]].initial_seed(),
        "get_rng_state": lambda device: generators[
            device if isinstance(device, int) else state["current"]
        ].get_state(),
        "set_rng_state": lambda s, device: generators[
            device if isinstance(device, int) else state["current"]
        ].set_state(s),
        "memory_allocated": lambda index: 100 + index,
        "max_memory_allocated": lambda index: 200 + index,
        "memory_reserved": lambda index: 300 + index,
        "max_memory_reserved": lambda index: 400 + index,
        "memory_stats": lambda index: {
            "allocated_bytes.all.current": 100 + index,
            "fragmentation": 0.5,
        },
        "reset_peak_memory_stats": record("reset_peak_memory_stats"),
        "reset_accumulated_memory_stats": record("reset_accumulated_memory_stats"),
        "empty_cache": record("empty_cache"),
        "mem_get_info": lambda index: (500 + index, 1000),
        "get_device_properties": lambda index: types.SimpleNamespace(total_memory=1000),
        "_lazy_call": record("_lazy_call"),
    }
    if streams:
        functions |= {
            "Stream": record("Stream", lambda **kwargs: torch.Stream()),
            "Event": record("Event", lambda **kwargs: torch.Event()),
            "stream": record("stream"),
            "current_stream": record("current_stream", lambda index: torch.Stream()),
            "default_stream": record("default_stream", lambda index: torch.Stream()),
        }
    for name, function in functions.items():
        if name not in without:
            setattr(module, name, function)
    module.default_generators = generators  # type: ignore[attr-defined]
    module.calls = calls  # type: ignore[attr-defined]
    return module
