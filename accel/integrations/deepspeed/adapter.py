"""DeepSpeed's accelerator interface, implemented once over any accel backend.

``AccelDeepSpeedAccelerator(acc)`` is what ``deepspeed.accelerator.get_accelerator()``
returns once the integration is installed. Every method of DeepSpeed 0.19's abstract
``DeepSpeedAccelerator`` is answered by accel's backend (CPU, CUDA, the torch devices,
plugins) with DeepSpeed's semantics. Where the backend honestly lacks a capability
(streams, graphs or profiler ranges on the CPU), the method behaves exactly as DeepSpeed's
own backend for a synchronous device does: ``stream()`` is a no-op context,
``current_stream()`` and ``create_graph()`` return ``None``, because DeepSpeed's runtime
calls them unconditionally and checks ``is_synchronized_device()`` itself.

Anything DeepSpeed's own backend for the same device has beyond the abstract class
(``communication_backend_version()`` on CUDA, ``get_rss()`` on the CPU) is forwarded to
that backend, so code written against it keeps working.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

import torch
from typing_extensions import override

from accel._validate import check_positive, check_tensor
from accel.protocols import Accelerator, GraphAPI, ProfilerAPI, StreamAPI

# DeepSpeed has no type information and pyright would infer its abstract methods as
# returning None; taken as Any, the adapter's own annotations are what is checked.
DeepSpeedAccelerator: Any = importlib.import_module(
    "deepspeed.accelerator.abstract_accelerator"
).DeepSpeedAccelerator

# DeepSpeed's own backend class for each device it knows, to forward what the abstract
# interface does not cover and to fall back to for op builders accel does not provide.
_NATIVE_BACKENDS = {
    "cuda": ("deepspeed.accelerator.cuda_accelerator", "CUDA_Accelerator"),
    "cpu": ("deepspeed.accelerator.cpu_accelerator", "CPU_Accelerator"),
    "xpu": ("deepspeed.accelerator.xpu_accelerator", "XPU_Accelerator"),
    "npu": ("deepspeed.accelerator.npu_accelerator", "NPU_Accelerator"),
    "mps": ("deepspeed.accelerator.mps_accelerator", "MPS_Accelerator"),
    "hpu": ("deepspeed.accelerator.hpu_accelerator", "HPU_Accelerator"),
    "mlu": ("deepspeed.accelerator.mlu_accelerator", "MLU_Accelerator"),
}

_TENSOR_TYPES = {
    "BFloat16Tensor": torch.bfloat16,
    "ByteTensor": torch.uint8,
    "DoubleTensor": torch.float64,
    "FloatTensor": torch.float32,
    "HalfTensor": torch.float16,
    "IntTensor": torch.int32,
    "LongTensor": torch.int64,
}


def native_backend(device_type: str) -> Any | None:
    """DeepSpeed's own accelerator object for ``device_type``, or ``None`` if it has none.

    Args:
        device_type: A torch device type, e.g. ``"cuda"``.

    Returns:
        A new instance of DeepSpeed's backend class for the type (``CUDA_Accelerator``,
        ``CPU_Accelerator``, ...); ``None`` for a type DeepSpeed has no backend for.

    Raises:
        ValueError: DeepSpeed's backend refuses to start on this machine (its MPS backend on
            torch older than 2.5, its HPU backend without ``habana_frameworks``).
    """
    location = _NATIVE_BACKENDS.get(device_type)
    if location is None:
        return None
    module = importlib.import_module(location[0])
    return getattr(module, location[1])()


def _index(device_index: object) -> Any:
    """DeepSpeed passes ``os.environ["LOCAL_RANK"]`` as a device index in places (ZeRO-3's
    ``device_name(os.environ["LOCAL_RANK"])``); its backends accept decimal strings, so
    the adapter does too. Everything else goes to accel's validation unchanged."""
    if isinstance(device_index, str) and device_index.isascii() and device_index.isdecimal():
        return int(device_index)
    return device_index


def _tensor_factory(name: str) -> Callable[[Any], Any]:
    dtype = _TENSOR_TYPES[name]

    def factory(self: AccelDeepSpeedAccelerator) -> Any:
        if self.device_type == "cpu":  # DeepSpeed's CPU backend returns torch's legacy classes
            return getattr(torch, name)
        return functools.partial(torch.tensor, dtype=dtype, device=self.device_type)

    factory.__name__ = name
    factory.__doc__ = f"A constructor of {dtype} tensors on the device (DeepSpeed's {name})."
    return factory


class AccelDeepSpeedAccelerator(DeepSpeedAccelerator):  # type: ignore[misc]
    """DeepSpeed's ``DeepSpeedAccelerator`` over accel's accelerator ``acc``."""

    def __init__(self, acc: Accelerator) -> None:
        super().__init__()  # pyright: ignore[reportUnknownMemberType]
        self.accel = acc
        self.device_type: str = acc.device_name()
        self._name: str = self.device_type  # DeepSpeed reads the device type from _name
        self._communication_backend_name: str = acc.communication_backend_name()
        self._compile_backend: str = acc.get_compile_backend()
        self.native_accelerator: Any | None = native_backend(self._name)
        """DeepSpeed's own accelerator for the device (what serves the ops and extras accel
        does not replace); None where DeepSpeed has none."""
        # DeepSpeed counts page-locked bytes only on devices that really pin host memory.
        self._torch_pins_host_memory: bool = self._name != "cpu"

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the class does not define: DeepSpeed's own backend's
        # extras. Private names are never forwarded (and may not exist yet in __init__).
        native = self.__dict__.get("native_accelerator")
        if name.startswith("_") or native is None:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return getattr(native, name)

    @override
    def __repr__(self) -> str:
        return f"AccelDeepSpeedAccelerator({type(self.accel).__name__})"

    # Runtime ------------------------------------------------------------------------
    def is_synchronized_device(self) -> bool:
        """True on devices without streams (the CPU): work is done when a call returns."""
        return self.accel.is_synchronized_device()

    # DeepSpeed's rule, as its own backends have it: a synchronized device times with the host
    # clock, orders its work by itself and cannot run ahead of memory.
    use_host_timers = resolves_data_dependency = is_synchronized_device
    handles_memory_backpressure = is_synchronized_device

    # Devices ------------------------------------------------------------------------
    def device_name(self, device_index: int | None = None) -> str:
        """The backend's ``device_name``; a decimal ``str`` (DeepSpeed passes
        ``os.environ["LOCAL_RANK"]`` in places) is taken as the ``int`` it spells."""
        return self.accel.device_name(_index(device_index))

    def device(self, device_index: int | None = None) -> torch.device | None:
        """``torch.device(device_type, device_index)``, torch checking the index; ``None`` on the
        CPU, as DeepSpeed's CPU backend returns (its comm layer passes this as
        ``init_process_group(device_id=...)``). A decimal ``str`` is taken as the ``int`` it
        spells."""
        if self._name == "cpu":
            return None
        return torch.device(self._name, _index(device_index))

    def set_device(self, device_index: int | str | torch.device) -> None:
        """The backend's ``set_device``, with what it takes (the built-in backends: also
        ``"<type>:<index>"`` and ``torch.device``); a decimal ``str`` is taken as the ``int`` it
        spells."""
        self.accel.set_device(_index(device_index))

    def current_device(self) -> int:
        """Index of the current device (``LOCAL_RANK`` on the CPU)."""
        return self.accel.current_device()

    def current_device_name(self) -> str:
        """Device string of the current device."""
        return self.accel.current_device_name()

    def device_count(self) -> int:
        """Number of devices (``LOCAL_SIZE`` or NUMA nodes on the CPU)."""
        return self.accel.device_count()

    def synchronize(self, device_index: int | None = None) -> None:
        """The backend's :meth:`~accel.protocols.DeviceAPI.synchronize`."""
        self.accel.synchronize(device_index)

    def is_available(self) -> bool:
        """Whether the device is usable."""
        return self.accel.is_available()

    # RNG ----------------------------------------------------------------------------
    def random(self) -> Any:
        """``torch.random`` (what every DeepSpeed backend returns)."""
        return torch.random

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        """The backend's :meth:`~accel.protocols.RNGAPI.set_rng_state`."""
        self.accel.set_rng_state(new_state, device_index)

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """The backend's :meth:`~accel.protocols.RNGAPI.get_rng_state`."""
        return self.accel.get_rng_state(device_index)

    def manual_seed(self, seed: int) -> None:
        """The backend's :meth:`~accel.protocols.RNGAPI.manual_seed`."""
        self.accel.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        """The backend's :meth:`~accel.protocols.RNGAPI.manual_seed_all`."""
        self.accel.manual_seed_all(seed)

    def initial_seed(self) -> int:
        """The seed of the current generator."""
        return self.accel.initial_seed()

    def default_generator(self, device_index: int) -> torch.Generator:
        """The backend's :meth:`~accel.protocols.RNGAPI.default_generator`."""
        return self.accel.default_generator(device_index)

    # Streams and events ---------------------------------------------------------------
    @property
    def Stream(self) -> Callable[..., Any] | None:
        """A stream constructor (``Stream(device=None, priority=0)``); ``None`` without
        streams, as on DeepSpeed's CPU backend."""
        acc = self.accel
        if not isinstance(acc, StreamAPI):
            return None

        def stream(device: int | torch.device | None = None, priority: int = 0) -> torch.Stream:
            index = device.index if isinstance(device, torch.device) else device
            return acc.Stream(index, priority=priority)

        return stream

    def stream(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        """The backend's ``stream(stream)``; ``contextlib.nullcontext()`` without streams
        (``stream`` is then not looked at)."""
        if isinstance(self.accel, StreamAPI):
            return self.accel.stream(stream)
        return contextlib.nullcontext()

    def current_stream(self, device_index: int | None = None) -> Any:
        """The backend's current stream of the device; ``None`` without streams."""
        if isinstance(self.accel, StreamAPI):
            return self.accel.current_stream(device_index)
        return None

    def default_stream(self, device_index: int | None = None) -> Any:
        """The backend's default stream of the device; ``None`` without streams."""
        if isinstance(self.accel, StreamAPI):
            return self.accel.default_stream(device_index)
        return None

    @property
    def Event(self) -> Callable[..., Any] | None:
        """An event constructor (torch's keywords); ``None`` without streams."""
        acc = self.accel
        if not isinstance(acc, StreamAPI):
            return None

        def event(
            enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
        ) -> torch.Event:
            return acc.Event(enable_timing, blocking, interprocess)

        return event

    # Memory -------------------------------------------------------------------------
    def empty_cache(self) -> None:
        """Release cached blocks to the system."""
        self.accel.empty_cache()

    def memory_allocated(self, device_index: int | None = None) -> int:
        """The backend's :meth:`~accel.protocols.MemoryUsageAPI.memory_allocated` (the process's
        resident memory on the CPU)."""
        return self.accel.memory_allocated(device_index)

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """The backend's :meth:`~accel.protocols.MemoryStatsAPI.max_memory_allocated`."""
        return self.accel.max_memory_allocated(device_index)

    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        """A new ``dict`` of the backend's :meth:`~accel.protocols.MemoryStatsAPI.memory_stats`."""
        return dict(self.accel.memory_stats(device_index))

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """The backend's :meth:`~accel.protocols.MemoryStatsAPI.reset_peak_memory_stats`."""
        self.accel.reset_peak_memory_stats(device_index)

    def memory_reserved(self, device_index: int | None = None) -> int:
        """The backend's :meth:`~accel.protocols.MemoryUsageAPI.memory_reserved`."""
        return self.accel.memory_reserved(device_index)

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """The backend's :meth:`~accel.protocols.MemoryStatsAPI.max_memory_reserved`."""
        return self.accel.max_memory_reserved(device_index)

    # torch's old names, aliases of the new ones in torch as here.
    memory_cached = memory_reserved
    max_memory_cached = max_memory_reserved
    reset_max_memory_allocated = reset_max_memory_cached = reset_peak_memory_stats

    def total_memory(self, device_index: int | None = None) -> int:
        """The backend's :meth:`~accel.protocols.MemoryUsageAPI.total_memory`."""
        return self.accel.total_memory(device_index)

    def available_memory(self, device_index: int | None = None) -> int:
        """The backend's :meth:`~accel.protocols.MemoryUsageAPI.available_memory`."""
        return self.accel.available_memory(device_index)

    # Data types ---------------------------------------------------------------------
    def is_bf16_supported(self) -> bool:
        """Whether bfloat16 runs natively."""
        return self.accel.is_bf16_supported()

    def is_fp16_supported(self) -> bool:
        """Whether float16 runs natively."""
        return self.accel.is_fp16_supported()

    def is_fp64_supported(self) -> bool:
        """DeepSpeed's own answer for the device (only MPS says no); True for others."""
        if self.native_accelerator is None:
            return True
        return bool(self.native_accelerator.is_fp64_supported())

    def supported_dtypes(self) -> list[torch.dtype]:
        """Floating-point types training may use."""
        return self.accel.supported_dtypes()

    def is_triton_supported(self) -> bool:
        """Whether Triton kernels run on the device."""
        return self.accel.is_triton_supported()

    # Profiler ranges ----------------------------------------------------------------
    def range_push(self, msg: str, domain: Any = None, category: Any = None) -> None:
        """The backend's ``range_push(msg)``; a no-op where it has no ranges. ``domain`` and
        ``category`` (an NVTX domain and category on DeepSpeed's CUDA backend) are not used."""
        if isinstance(self.accel, ProfilerAPI):
            self.accel.range_push(msg)

    def range_pop(self, domain: Any = None) -> None:
        """The backend's ``range_pop()``; a no-op where it has no ranges. ``domain`` is not used."""
        if isinstance(self.accel, ProfilerAPI):
            self.accel.range_pop()

    # Misc ---------------------------------------------------------------------------
    def lazy_call(self, callback: Callable[[], Any]) -> Any:
        """The backend's :meth:`~accel.protocols.RuntimeAPI.lazy_call`."""
        return self.accel.lazy_call(callback)

    def communication_backend_name(self) -> str:
        """The torch.distributed backend for the device."""
        return self.accel.communication_backend_name()

    def get_compile_backend(self) -> str:
        """The ``torch.compile`` backend."""
        return self.accel.get_compile_backend()

    def set_compile_backend(self, backend: str) -> None:
        """The backend's ``set_compile_backend``, which checks the name; :meth:`get_compile_backend`
        then answers it."""
        self.accel.set_compile_backend(backend)
        self._compile_backend = backend

    # Graphs -------------------------------------------------------------------------
    def is_current_stream_capturing(self) -> bool:
        """Whether a graph capture is running on the current stream; False without graphs."""
        if not isinstance(self.accel, GraphAPI):
            return False
        probe = getattr(torch.get_device_module(self._name), "is_current_stream_capturing", None)
        return bool(probe()) if probe is not None else False

    def create_graph(self) -> Any:
        """A new graph; ``None`` without graph capture (DeepSpeed's CPU backend)."""
        if isinstance(self.accel, GraphAPI):
            return self.accel.create_graph()
        return None

    def capture_to_graph(self, graph: Any, pool: Any = None, stream: Any = None) -> Any:
        """The backend's ``capture_to_graph``; ``contextlib.nullcontext()`` without graphs (the
        arguments are then not looked at)."""
        if isinstance(self.accel, GraphAPI):
            return self.accel.capture_to_graph(graph, pool, stream)
        return contextlib.nullcontext()

    def replay_graph(self, graph: Any) -> None:
        """The backend's ``replay_graph``; a no-op without graphs."""
        if isinstance(self.accel, GraphAPI):
            self.accel.replay_graph(graph)

    # Tensors ------------------------------------------------------------------------
    BFloat16Tensor = property(_tensor_factory("BFloat16Tensor"))
    ByteTensor = property(_tensor_factory("ByteTensor"))
    DoubleTensor = property(_tensor_factory("DoubleTensor"))
    FloatTensor = property(_tensor_factory("FloatTensor"))
    HalfTensor = property(_tensor_factory("HalfTensor"))
    IntTensor = property(_tensor_factory("IntTensor"))
    LongTensor = property(_tensor_factory("LongTensor"))

    def _torch_pin_memory(self, tensor: torch.Tensor) -> torch.Tensor:
        # DeepSpeed's public pin_memory/pin_empty dispatch here when its native pinned
        # memory backend is off.
        return self.accel.pin_memory(tensor)

    def _torch_empty_pinned(self, tensor: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        return self.accel.pin_memory(tensor.new_empty(tuple(shape)))

    def _torch_is_pinned(self, tensor: torch.Tensor) -> bool:
        # DeepSpeed's contract: outside its native backend's buffers, a tensor is pinned
        # exactly when torch says so. accel's CPU backend counts every host tensor as
        # staged, which DeepSpeed would take as torch-pinned: its compile passes then
        # build fake tensors with pin_memory=True, which a CPU build of torch refuses, and
        # after unpin_memory() a freed native buffer would still read as pinned.
        return bool(check_tensor(tensor).is_pinned())

    def register_host_memory(self, address: int, num_bytes: int) -> bool:
        """Through DeepSpeed's own backend for the device (CUDA: ``cudaHostRegister``); ``False``
        where it registers nothing: the CPU, and devices DeepSpeed has no backend for. ``address``
        and ``num_bytes`` are checked first (an ``int`` of at least 1)."""
        address = check_positive(address, "address")
        num_bytes = check_positive(num_bytes, "num_bytes")
        if self.native_accelerator is None:
            return False
        return bool(self.native_accelerator.register_host_memory(address, num_bytes))

    def unregister_host_memory(self, address: int) -> None:
        """Through DeepSpeed's own backend for the device, ``address`` checked first; nothing where
        it registers nothing."""
        address = check_positive(address, "address")
        if self.native_accelerator is not None:
            self.native_accelerator.unregister_host_memory(address)

    def pin_memory_alignment(self) -> int:
        """The byte alignment the device runtime needs for :meth:`register_host_memory`
        (4096 on an NPU); 1 where it needs none or registers nothing."""
        if self.native_accelerator is None:
            return 1
        return int(self.native_accelerator.pin_memory_alignment())

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        """The backend's :meth:`~accel.protocols.TensorAPI.on_accelerator`."""
        return self.accel.on_accelerator(tensor)

    # Op builders --------------------------------------------------------------------
    def op_builder_dir(self) -> str:
        """DeepSpeed's builder package for the device (DeepSpeed lists builder names there)."""
        if self.native_accelerator is not None:
            return str(self.native_accelerator.op_builder_dir())
        return "deepspeed.ops.op_builder"

    def get_op_builder(self, class_name: str) -> type[Any] | None:
        """accel's prebuilt builder for ``class_name`` where there is one (an
        :class:`~accel.integrations.deepspeed.op_builders.AccelOpBuilder` subclass), otherwise
        DeepSpeed's own backend's answer for the device, so nothing that worked before breaks;
        ``None`` where the device has no DeepSpeed backend."""
        from accel.integrations.deepspeed.op_builders import accel_builder

        builder = accel_builder(self._name, class_name)
        if builder is not None:
            return builder
        if self.native_accelerator is None:
            return None
        native: type[Any] | None = self.native_accelerator.get_op_builder(class_name)
        return native

    def create_op_builder(self, class_name: str) -> Any | None:
        """An instance of :meth:`get_op_builder`'s class, made with no arguments; ``None`` where it
        answers ``None``."""
        builder = self.get_op_builder(class_name)
        return builder() if builder is not None else None

    def build_extension(self) -> Any:
        """torch's ``BuildExtension`` (for DeepSpeed's fallback builders)."""
        from torch.utils.cpp_extension import BuildExtension

        return BuildExtension

    # Launcher environment -----------------------------------------------------------
    def export_envs(self) -> list[str]:
        """Prefixes of variables a multi-node launcher forwards (accel's, ``ACCEL`` first)."""
        return self.accel.export_envs()

    def visible_devices_envs(self) -> list[str]:
        """Variables that restrict the visible devices.

        DeepSpeed's launcher writes rank-slot ids into them. On the CPU those are not
        NUMA node ids (accel's ``ACCEL_VISIBLE_NUMA_NODES``), so the CPU keeps
        DeepSpeed's own variables; other devices use accel's.
        """
        if self._name == "cpu" and self.native_accelerator is not None:
            return list(self.native_accelerator.visible_devices_envs())
        return self.accel.visible_devices_envs()

    def set_visible_devices_envs(
        self, current_env: MutableMapping[str, str], local_accelerator_ids: Sequence[int]
    ) -> None:
        """On the CPU, DeepSpeed's own backend writes them, unchecked; elsewhere the backend's
        ``set_visible_devices_envs`` does."""
        if self._name == "cpu" and self.native_accelerator is not None:
            self.native_accelerator.set_visible_devices_envs(current_env, local_accelerator_ids)
            return
        self.accel.set_visible_devices_envs(current_env, list(local_accelerator_ids))
