"""accel: one typed interface to every PyTorch accelerator.

    from accel import get_accelerator
    acc = get_accelerator()
    x = torch.ones(4, device=acc.current_device_name())

Capabilities are small protocols in :mod:`accel.protocols`; test for optional ones with
``isinstance(acc, GraphAPI)``, which narrows the static type.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from accel._version import __version__

if TYPE_CHECKING:
    from accel._selection import (
        current_selection,
        get_accelerator,
        reset_accelerator,
        set_accelerator,
    )
    from accel.protocols import Accelerator

__all__ = [
    "Accelerator",
    "__version__",
    "current_selection",
    "get_accelerator",
    "reset_accelerator",
    "set_accelerator",
]

# Loaded on first use, so that importing a light submodule (the DeepSpeed startup hook
# runs in every process of a job) does not pay for the selection machinery.
_LAZY = {
    "Accelerator": "accel.protocols",
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
