"""One backend class for every torch device type; named devices are a few lines each.

A :class:`TorchDeviceBackend` subclass names its device type. Its optional capabilities
(streams, graphs) are read from ``torch.get_device_module(device_type)`` when the first
instance is made, so a device module without streams yields a backend that is not a
``StreamAPI``: ``XPUAccelerator()`` returns an instance of a subclass composed for the
device actually present.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

from accel._device_module import device_module
from accel._fork_safe import ForkSafeLock
from accel._torch_typed import privateuse1_backend_name
from accel.backends.base import Availability
from accel.mixins import (
    CompileBackendMixin,
    DeviceCapabilityMixin,
    DeviceNamingMixin,
    DTypeListMixin,
    NoGraphMixin,
    NoStreamMixin,
    PinnedHostMemoryMixin,
    RecordFunctionProfilerMixin,
    RuntimeEnvMixin,
    TensorPlacementMixin,
    TorchDeviceMixin,
    TorchDTypeMixin,
    TorchGraphMixin,
    TorchMemoryMixin,
    TorchRNGMixin,
    TorchRuntimeMixin,
    TorchStreamMixin,
)
from accel.mixins.graph import graph_class

# Module functions the core protocols are built on; a device module lacking any of them
# cannot back an Accelerator, and the probe says which are missing.
CORE_MODULE_FUNCTIONS = (
    "device_count", "current_device", "set_device", "synchronize", "is_available",
    "manual_seed", "manual_seed_all", "initial_seed", "get_rng_state", "set_rng_state",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "reset_peak_memory_stats", "reset_accumulated_memory_stats", "empty_cache",
    "mem_get_info",
    "get_device_properties",
)  # fmt: skip
# default_stream is optional: torch.xpu has none (TorchStreamMixin answers with the current one).
STREAM_MODULE_MEMBERS = ("Stream", "Event", "stream", "current_stream")


def has_streams(device_type: str) -> bool:
    """Whether ``torch.<device_type>`` provides every stream and event member.

    Args:
        device_type: A torch device type, e.g. ``"xpu"``.

    Returns:
        ``True`` when every name in ``STREAM_MODULE_MEMBERS`` is callable on the module.

    Raises:
        RuntimeError: torch has no ``torch.<device_type>`` module.
    """
    module = device_module(device_type)
    return all(callable(getattr(module, member, None)) for member in STREAM_MODULE_MEMBERS)


def probe_device_module(device_type: str, functions: tuple[str, ...]) -> Availability:
    """Whether ``torch.<device_type>`` exists, has each of ``functions`` and sees a device.

    Args:
        device_type: The torch device type, e.g. ``"xpu"``.
        functions: What the backend calls on the device module.

    Returns:
        Available with the device count, or not, with what is missing: the module, the
        functions, or an available device.
    """
    try:
        module = device_module(device_type)
    except (RuntimeError, AttributeError) as error:
        return Availability(False, f"torch has no {device_type} device module: {error}")
    missing = [f for f in functions if not callable(getattr(module, f, None))]
    if missing:
        return Availability(False, f"torch.{device_type} lacks {', '.join(missing)}")
    if not module.is_available():
        return Availability(False, f"torch.{device_type}.is_available() is False")
    return Availability(True, f"{module.device_count()} device(s)")


class TorchDeviceCommon(
    TorchDTypeMixin,
    DTypeListMixin,
    DeviceCapabilityMixin,
    TensorPlacementMixin,
    PinnedHostMemoryMixin,
    RuntimeEnvMixin,
    CompileBackendMixin,
    TorchRuntimeMixin,
):
    """What every torch device type does through torch alike, whatever its device selection,
    RNG and memory: dtypes, capability queries, tensor placement, pinned host memory, the
    runtime environment and the compile backend."""


class TorchDeviceBackend(
    DeviceNamingMixin,
    TorchDeviceMixin,
    TorchRNGMixin,
    TorchMemoryMixin,
    TorchDeviceCommon,
):
    """The core protocols for a torch device type. Subclasses set the class attributes.

    ``runtime_modules`` are imported by the probe before torch is asked about the device:
    out-of-tree devices register themselves with torch on import (``torch_npu``, ...).
    """

    name: ClassVar[str]
    priority: ClassVar[int] = 50
    device_type: ClassVar[str]
    runtime_modules: ClassVar[tuple[str, ...]] = ()
    visible_devices_env_names: ClassVar[tuple[str, ...]] = ()
    exported_env_prefixes: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def resolve_device_type(cls) -> str:
        """The torch device type this backend drives (fixed, except for PrivateUse1)."""
        return cls.device_type

    @classmethod
    def probe(cls) -> Availability:
        """Available when the device's runtime imports and torch sees one device or more."""
        for module_name in cls.runtime_modules:
            try:
                importlib.import_module(module_name)
            except ImportError as error:
                return Availability(False, f"{module_name} does not import: {error}")
        return probe_device_module(cls.resolve_device_type(), CORE_MODULE_FUNCTIONS)


class DiscoveredTorchDevice(TorchDeviceBackend):
    """A device type whose streams and graphs are discovered from its torch module."""

    def __new__(cls, *args: Any, **kwargs: Any) -> DiscoveredTorchDevice:
        instance: DiscoveredTorchDevice = object.__new__(compose_for_device(cls))
        return instance


_composed_classes: dict[type[DiscoveredTorchDevice], type[DiscoveredTorchDevice]] = {}
_compose_lock = ForkSafeLock()  # held while a backend is constructed


def compose_for_device(cls: type[DiscoveredTorchDevice]) -> type[DiscoveredTorchDevice]:
    """``cls`` plus the stream, graph and profiler mixins its device module supports.

    Made once per class (under a lock, so every instance shares one composed class).
    """
    if cls.__dict__.get("_composed", False):
        return cls
    with _compose_lock:
        composed = _composed_classes.get(cls)
        if composed is None:
            composed = _composed_classes[cls] = _compose(cls)
        return composed


def _compose(cls: type[DiscoveredTorchDevice]) -> type[DiscoveredTorchDevice]:
    device_type = cls.resolve_device_type()
    try:
        device_module(device_type)
    except (RuntimeError, AttributeError) as error:
        raise RuntimeError(
            f"cannot create the {cls.name} backend here: {cls.probe().reason}"
        ) from error
    streams = TorchStreamMixin if has_streams(device_type) else NoStreamMixin
    graphs = TorchGraphMixin if graph_class(device_type) is not None else NoGraphMixin
    namespace = {
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "_composed": True,
        "device_type": device_type,
    }
    composed: type[DiscoveredTorchDevice] = type(
        cls.__name__, (streams, graphs, RecordFunctionProfilerMixin, cls), namespace
    )
    return composed


def privateuse1_name() -> str:
    """The name an out-of-tree device gave torch's PrivateUse1 slot (else ``privateuseone``)."""
    return privateuse1_backend_name()
