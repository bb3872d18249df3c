"""RuntimeAPI pieces that come from torch for any device type: collectives, lazy init."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from accel.mixins.torch_device import device_module
from accel.protocols.stream import StreamAPI

# The collectives library each vendor ships for its device. Known types use this table
# first: torch's own default map is global and mutable, and registering a backend for a
# device overwrites it (importing torch._dynamo registers the testing "fake" process group
# for hpu, after which torch reports "fake" as hpu's default).
VENDOR_COMMUNICATION_BACKENDS: dict[str, str] = {
    "cuda": "nccl",
    "xpu": "xccl",
    "hpu": "hccl",
    "npu": "hccl",
    "mlu": "cncl",
    "mps": "gloo",
    "mtia": "gloo",
}


def default_communication_backend(device_type: str) -> str:
    """The vendor's backend for a known type; else torch.distributed's default; else gloo."""
    known = VENDOR_COMMUNICATION_BACKENDS.get(device_type)
    if known is not None:
        return known
    import torch.distributed as dist

    lookup = getattr(dist, "get_default_backend_for_device", None)  # torch >= 2.6
    if callable(lookup):
        try:
            return str(lookup(device_type))
        except (RuntimeError, ValueError):
            pass  # the device registered no default backend
    return "gloo"


class TorchRuntimeMixin:
    """``communication_backend_name``, ``lazy_call``, ``is_synchronized_device``."""

    device_type: ClassVar[str]

    def is_synchronized_device(self) -> bool:
        """True exactly when the backend has no streams (derived, so it cannot drift)."""
        return not isinstance(self, StreamAPI)

    def communication_backend_name(self) -> str:
        """The torch.distributed backend for this device type."""
        return default_communication_backend(self.device_type)

    def lazy_call(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the device runtime starts (now, if it has started)."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        module = device_module(self.device_type)
        lazy = getattr(module, "_lazy_call", None)
        if callable(lazy):
            lazy(callback)
        else:
            callback()
