"""``torch.<device_type>`` lookup shared by the torch-device mixins and backends."""

from __future__ import annotations

from types import ModuleType

import torch


def device_module(device_type: str) -> ModuleType:
    """``torch.<device_type>``; ``RuntimeError`` when torch has no such module.

    ``torch.get_device_module`` caches its answers, so this is cheap on hot paths.
    """
    module: ModuleType = torch.get_device_module(device_type)
    return module
