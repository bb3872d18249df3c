"""accel: one typed interface to every PyTorch accelerator.

    from accel import get_accelerator
    acc = get_accelerator()
    x = torch.ones(4, device=acc.current_device_name())

Capabilities are small protocols in :mod:`accel.protocols`; test for optional ones with
``isinstance(acc, GraphAPI)``, which narrows the static type. The functions of
:mod:`accel.functions` (``accel.set_device``, ``accel.get_device_properties``, ...) work
with every backend, including those written before their members existed.
"""

from __future__ import annotations

import importlib

from accel._version import __version__

# Not typing.TYPE_CHECKING: importing typing costs 2-3 ms, which a process importing only
# a light submodule of accel should not pay. mypy and pyright read a module-level
# TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from accel._selection import (
        current_selection,
        get_accelerator,
        reset_accelerator,
        set_accelerator,
    )
    from accel.functions import (
        current_accelerator,
        current_device_index,
        current_stream,
        ddp_device_ids,
        ddp_output_device,
        device_count,
        device_index,
        empty_cache,
        empty_host_cache,
        fork_rng,
        get_device_capability,
        get_device_properties,
        get_memory_info,
        is_available,
        max_memory_allocated,
        max_memory_reserved,
        memory_allocated,
        memory_reserved,
        memory_stats,
        process_group_device_id,
        reset_accumulated_memory_stats,
        reset_peak_memory_stats,
        set_device,
        set_device_index,
        set_stream,
        synchronize,
    )
    from accel.protocols import API_VERSION, Accelerator

__all__ = [
    "API_VERSION",
    "Accelerator",
    "__version__",
    "current_accelerator",
    "current_device_index",
    "current_selection",
    "current_stream",
    "ddp_device_ids",
    "ddp_output_device",
    "device_count",
    "device_index",
    "empty_cache",
    "empty_host_cache",
    "fork_rng",
    "get_accelerator",
    "get_device_capability",
    "get_device_properties",
    "get_memory_info",
    "is_available",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "process_group_device_id",
    "reset_accelerator",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "set_accelerator",
    "set_device",
    "set_device_index",
    "set_stream",
    "synchronize",
]

# Loaded on first use, so that importing a light submodule does not pay for the
# selection machinery.
_LAZY = {
    "API_VERSION": "accel.protocols",
    "Accelerator": "accel.protocols",
    "current_accelerator": "accel.functions",
    "current_device_index": "accel.functions",
    "ddp_device_ids": "accel.functions",
    "empty_host_cache": "accel.functions",
    "get_device_capability": "accel.functions",
    "get_memory_info": "accel.functions",
    "set_device_index": "accel.functions",
    "set_stream": "accel.functions",
    "ddp_output_device": "accel.functions",
    "device_index": "accel.functions",
    "fork_rng": "accel.functions",
    "get_device_properties": "accel.functions",
    "process_group_device_id": "accel.functions",
    "reset_accumulated_memory_stats": "accel.functions",
    "set_device": "accel.functions",
    "device_count": "accel.functions",
    "is_available": "accel.functions",
    "synchronize": "accel.functions",
    "empty_cache": "accel.functions",
    "memory_allocated": "accel.functions",
    "memory_reserved": "accel.functions",
    "max_memory_allocated": "accel.functions",
    "max_memory_reserved": "accel.functions",
    "memory_stats": "accel.functions",
    "reset_peak_memory_stats": "accel.functions",
    "current_stream": "accel.functions",
    "current_selection": "accel._selection",
    "get_accelerator": "accel._selection",
    "reset_accelerator": "accel._selection",
    "set_accelerator": "accel._selection",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'accel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
