"""Named torch device types. Each is its name, priority, runtime import and env names.

Streams and graphs are discovered from the device module (see ``torch_device``). A device
whose torch module lacks the functions the core protocols need (today ``torch.mtia``: it
has allocation peaks but no reserved memory or free-memory query) is reported unavailable
by its probe, with the missing functions named, instead of being given made-up numbers.
Apple's MPS, whose module differs in shape (one device, current sizes only), has its own
backend in ``accel.backends.mps``.
"""

from __future__ import annotations

from typing import ClassVar

from typing_extensions import override

from accel.backends.base import Availability
from accel.backends.mps import MPSAccelerator
from accel.backends.torch_device import DiscoveredTorchDevice, privateuse1_name

__all__ = [
    "HPUAccelerator",
    "MLUAccelerator",
    "MPSAccelerator",
    "MTIAAccelerator",
    "NPUAccelerator",
    "PrivateUse1Accelerator",
    "XPUAccelerator",
]


class XPUAccelerator(DiscoveredTorchDevice):
    """Intel GPUs (``torch.xpu``)."""

    name: ClassVar[str] = "xpu"
    priority: ClassVar[int] = 90
    device_type: ClassVar[str] = "xpu"
    visible_devices_env_names: ClassVar[tuple[str, ...]] = ("ZE_AFFINITY_MASK",)
    exported_env_prefixes: ClassVar[tuple[str, ...]] = ("ZE", "CCL", "I_MPI", "SYCL")


class NPUAccelerator(DiscoveredTorchDevice):
    """Huawei Ascend NPUs (``torch_npu``, registered as PrivateUse1 ``npu``)."""

    name: ClassVar[str] = "npu"
    priority: ClassVar[int] = 80
    device_type: ClassVar[str] = "npu"
    runtime_modules: ClassVar[tuple[str, ...]] = ("torch_npu",)
    visible_devices_env_names: ClassVar[tuple[str, ...]] = ("ASCEND_RT_VISIBLE_DEVICES",)
    exported_env_prefixes: ClassVar[tuple[str, ...]] = ("ASCEND", "HCCL")


class HPUAccelerator(DiscoveredTorchDevice):
    """Intel Gaudi (``habana_frameworks.torch``)."""

    name: ClassVar[str] = "hpu"
    priority: ClassVar[int] = 80
    device_type: ClassVar[str] = "hpu"
    runtime_modules: ClassVar[tuple[str, ...]] = ("habana_frameworks.torch.hpu",)
    visible_devices_env_names: ClassVar[tuple[str, ...]] = ("HABANA_VISIBLE_MODULES",)
    exported_env_prefixes: ClassVar[tuple[str, ...]] = ("HABANA", "PT_HPU", "HCCL")
    default_compile_backend: ClassVar[str] = "hpu_backend"  # inductor has no HPU codegen


class MLUAccelerator(DiscoveredTorchDevice):
    """Cambricon MLUs (``torch_mlu``)."""

    name: ClassVar[str] = "mlu"
    priority: ClassVar[int] = 80
    device_type: ClassVar[str] = "mlu"
    runtime_modules: ClassVar[tuple[str, ...]] = ("torch_mlu",)
    visible_devices_env_names: ClassVar[tuple[str, ...]] = ("MLU_VISIBLE_DEVICES",)
    exported_env_prefixes: ClassVar[tuple[str, ...]] = ("MLU", "CNCL")


class MTIAAccelerator(DiscoveredTorchDevice):
    """Meta's MTIA (``torch.mtia``)."""

    name: ClassVar[str] = "mtia"
    priority: ClassVar[int] = 60
    device_type: ClassVar[str] = "mtia"


class PrivateUse1Accelerator(DiscoveredTorchDevice):
    """Any out-of-tree device that renamed torch's PrivateUse1 slot and registered a module.

    Named devices above win by priority; this catches the ones accel has never heard of.
    """

    name: ClassVar[str] = "privateuse1"
    priority: ClassVar[int] = 40
    device_type: ClassVar[str] = "privateuseone"

    @classmethod
    @override
    def resolve_device_type(cls) -> str:
        """The name the out-of-tree device registered, read when the backend is made."""
        return privateuse1_name()

    @classmethod
    @override
    def probe(cls) -> Availability:
        """Available when an out-of-tree device registered PrivateUse1 and has devices."""
        if privateuse1_name() == "privateuseone":
            return Availability(False, "no out-of-tree device has registered torch's PrivateUse1")
        return super().probe()
