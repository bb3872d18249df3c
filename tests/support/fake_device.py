"""A working fake accelerator for CI: torch's PrivateUse1 slot, implemented in Python.

``install(name)`` renames PrivateUse1 to ``name`` and registers ``torch.<name>``, a device
module with every function accel's torch-device backends use. Tensors on the device are
wrapper tensors around CPU tensors: every aten op on them (and every factory call with
``device=name``) runs on the CPU through one boxed fallback and is wrapped back, so real
model code runs. The module's numbers are honest for that device:

- memory: bytes of the storages its tensors hold, with a peak (``torch.cuda``'s keys);
- RNG: one generator per device index; random ops on the device draw from it;
- no streams and no graphs (the module has none, so the backend composed for it has none).

Renaming PrivateUse1 is once per process and cannot be undone: call ``install`` in a
subprocess (tests/backends/test_fake_device.py does).
"""

from __future__ import annotations

import threading
import types
import weakref
from typing import Any

import psutil
import torch
from torch.utils import _pytree as pytree
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

COUNT = 2


class _Generator(torch.Generator):
    """A CPU generator that reports the fake device (random ops run on the CPU)."""

    index: int
    device_type: str

    def __new__(cls, device_type: str, index: int) -> _Generator:
        self = super().__new__(cls, device="cpu")
        self.device_type, self.index = device_type, index
        return self

    def __init__(self, device_type: str, index: int) -> None:
        pass  # torch.Generator.__init__ would read the arguments as a device

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device(self.device_type, self.index)


class _Memory:
    """Bytes held by the device's tensors, counted per storage (views share one)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: dict[int, list[int]] = {}  # storage address -> [bytes, wrappers]
        self.allocated = 0
        self.peak = 0

    def track(self, wrapper: torch.Tensor, raw: torch.Tensor) -> None:
        storage = raw.untyped_storage()
        key, size = storage.data_ptr(), storage.nbytes()
        with self.lock:
            entry = self.live.get(key)
            if entry is None:
                self.live[key] = [size, 1]
                self.allocated += size
                self.peak = max(self.peak, self.allocated)
            else:
                entry[1] += 1
        weakref.finalize(wrapper, self.untrack, key)

    def untrack(self, key: int) -> None:
        with self.lock:
            entry = self.live[key]
            entry[1] -= 1
            if entry[1] == 0:
                del self.live[key]
                self.allocated -= entry[0]


def install(name: str) -> types.ModuleType:
    """Make ``name`` a device type whose tensors compute on the CPU; returns its module."""
    memory = _Memory()
    state = {"current": 0}
    generators = tuple(_Generator(name, i) for i in range(COUNT))

    class DeviceTensor(torch.Tensor):
        raw: torch.Tensor

        @staticmethod
        def __new__(cls, raw: torch.Tensor) -> DeviceTensor:
            wrapper: DeviceTensor = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
                cls, raw.size(), strides=raw.stride(), storage_offset=raw.storage_offset(),
                dtype=raw.dtype, device=torch.device(name, state["current"]),
                requires_grad=raw.requires_grad,
            )  # fmt: skip
            wrapper.raw = raw
            memory.track(wrapper, raw)
            return wrapper

        __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

        @classmethod
        def __torch_dispatch__(
            cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            return run(func, args, kwargs or {})

    def on_device(value: object) -> bool:
        return isinstance(value, torch.device) and value.type == name

    def run(op: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        leaves, spec = pytree.tree_flatten((args, kwargs))
        target = kwargs.get("device")
        to_device = (
            on_device(target) if target is not None
            else any(isinstance(x, DeviceTensor) for x in leaves)
        )  # fmt: skip
        raw_leaves = [
            x.raw if isinstance(x, DeviceTensor) else (torch.device("cpu") if on_device(x) else x)
            for x in leaves
        ]
        raw_args, raw_kwargs = pytree.tree_unflatten(raw_leaves, spec)
        if to_device and torch.Tag.nondeterministic_seeded in op.tags:
            out = _with_generator(generators[state["current"]], op, raw_args, raw_kwargs)
        else:
            out = op(*raw_args, **raw_kwargs)

        def back(value: object) -> object:
            if isinstance(value, torch.Tensor):
                for original, raw in zip(leaves, raw_leaves, strict=True):
                    if value is raw:  # in-place and out= results are their argument
                        return original
                if to_device and value.device.type == "cpu":
                    return DeviceTensor(value)
            return value

        return pytree.tree_map(back, out)

    def index_of(device: object = None) -> int:
        if isinstance(device, int):
            return device
        if isinstance(device, torch.device) and device.index is not None:
            return device.index
        return state["current"]

    def set_device(index: int) -> None:
        if not 0 <= index < COUNT:
            raise RuntimeError(f"{name} has no device {index}")
        state["current"] = index

    def stats(index: int | None = None) -> dict[str, int]:
        return {
            "allocated_bytes.all.current": memory.allocated,
            "allocated_bytes.all.peak": memory.peak,
            "reserved_bytes.all.current": memory.allocated,
            "reserved_bytes.all.peak": memory.peak,
        }

    def reset_peak(index: int | None = None) -> None:
        with memory.lock:
            memory.peak = memory.allocated

    total = psutil.virtual_memory().total
    module = types.ModuleType(f"torch.{name}")
    functions: dict[str, Any] = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_is_in_bad_fork": lambda: False,
        "device_count": lambda: COUNT,
        "current_device": lambda: state["current"],
        "set_device": set_device,
        "synchronize": lambda device=None: None,  # ops finish on return: nothing to wait for
        "manual_seed": lambda seed: generators[state["current"]].manual_seed(seed),
        "manual_seed_all": lambda seed: [g.manual_seed(seed) for g in generators],
        "initial_seed": lambda: generators[state["current"]].initial_seed(),
        "get_rng_state": lambda device=None: generators[index_of(device)].get_state(),
        "set_rng_state": lambda new, device=None: generators[index_of(device)].set_state(new),
        "memory_allocated": lambda index=None: memory.allocated,
        "max_memory_allocated": lambda index=None: memory.peak,
        "memory_reserved": lambda index=None: memory.allocated,
        "max_memory_reserved": lambda index=None: memory.peak,
        "memory_stats": stats,
        "reset_peak_memory_stats": reset_peak,
        # memory_stats() reports no totals that only grow, so there is nothing to zero.
        "reset_accumulated_memory_stats": lambda index=None: None,
        "empty_cache": lambda: None,  # no caching allocator: nothing is held back
        "mem_get_info": lambda index=None: (max(total - memory.allocated, 0), total),
        "get_device_properties": lambda index=None: types.SimpleNamespace(
            name=f"{name} (CPU-backed fake)", total_memory=total
        ),
    }
    for function_name, function in functions.items():
        setattr(module, function_name, function)
    module.default_generators = generators  # type: ignore[attr-defined]
    module.memory = memory  # type: ignore[attr-defined]
    _setup_privateuseone_for_python_backend(rename=name, backend_module=module)
    library = torch.library.Library("_", "IMPL")
    library.fallback(lambda op, *args, **kwargs: run(op, args, kwargs), "PrivateUse1")
    # torch.tensor(data, device=...) copies with torch's Python key excluded, so the copy
    # reaches PrivateUse1 directly; torch then looks for a kernel registered for that op
    # (a fallback is not one) and asserts. A per-op kernel for it closes the gap.
    per_op = torch.library.Library("aten", "IMPL")
    for op in (torch.ops.aten._to_copy.default, torch.ops.aten.lift_fresh.default):
        per_op.impl(op, lambda *args, _op=op, **kwargs: run(_op, args, kwargs), "PrivateUse1")
    module._library = (library, per_op)  # type: ignore[attr-defined]  # keep them alive
    return module


def _with_generator(generator: torch.Generator, op: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    # The op runs on the CPU and draws from the CPU default generator: lend it the device
    # generator's state for the call and take the advanced state back.
    saved = torch.default_generator.get_state()
    torch.default_generator.set_state(generator.get_state())
    try:
        return op(*args, **kwargs)
    finally:
        generator.set_state(torch.default_generator.get_state())
        torch.default_generator.set_state(saved)
