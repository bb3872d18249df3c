"""A third-party backend without peak statistics, composed as docs/plugins.md says: it is a
``CoreAccelerator``, ``set_accelerator()`` takes it, and ``supports_memory_stats`` narrows."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import accel
from accel.mixins import (
    CompileBackendMixin,
    DeviceNamingMixin,
    DTypeListMixin,
    HostMemoryUsageMixin,
    HostRNGMixin,
    HostStagingMixin,
    NoGraphMixin,
    NoMemoryStatsMixin,
    NoStreamMixin,
    RuntimeEnvMixin,
    SingleDeviceMixin,
    TensorPlacementMixin,
)
from accel.protocols import CoreAccelerator, supports_memory_stats


class NoPeaksDevice(
    NoStreamMixin, NoGraphMixin, NoMemoryStatsMixin,
    SingleDeviceMixin, DeviceNamingMixin, HostRNGMixin, HostMemoryUsageMixin, DTypeListMixin,
    TensorPlacementMixin, HostStagingMixin, RuntimeEnvMixin, CompileBackendMixin,
):  # fmt: skip
    name: ClassVar[str] = "nopeaks"
    device_type: ClassVar[str] = "cpu"
    indexed_device_names: ClassVar[bool] = False
    visible_devices_env_names: ClassVar[tuple[str, ...]] = ()
    exported_env_prefixes: ClassVar[tuple[str, ...]] = ()

    def is_bf16_supported(self) -> bool:
        return True

    def lazy_call(self, callback: Callable[[], None]) -> None:
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {callback!r}")
        callback()  # the runtime is up as soon as the class is made

    def is_fp16_supported(self) -> bool:
        return True

    def communication_backend_name(self) -> str:
        return "gloo"

    def is_triton_supported(self) -> bool:
        return False


def select_it() -> None:
    """Given to set_accelerator() as what it is."""
    accel.set_accelerator(NoPeaksDevice())


def peak_or_usage(device: CoreAccelerator) -> int:
    """The peak where the backend keeps one, after the check that narrows."""
    if supports_memory_stats(device):
        return device.max_memory_allocated()
    return device.memory_allocated()


core: CoreAccelerator = NoPeaksDevice()
