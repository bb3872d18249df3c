"""A stand-in for ``torch.mps`` with exactly torch 2.13's names (``dir(torch.mps)``).

Its functions answer from a backing device module (``fake_device.install``'s, whose
tensors really live somewhere) or, without one, from fixed numbers. What accel's MPS
backend must not call (``compile_shader``, ...) raises, so a call would show.
"""

from __future__ import annotations

import types
from typing import Any

import torch

# dir(torch.mps) on torch 2.13.0 without the module dunders; test_mps.py checks the list
# against the installed torch.
MPS_NAMES = (
    "Event", "Tensor", "_default_mps_generator", "_get_default_mps_generator",
    "_host_alias_storage", "_is_in_bad_fork", "compile_shader", "current_allocated_memory",
    "device_count", "driver_allocated_memory", "empty_cache", "event", "get_rng_state",
    "is_available", "load_metallib", "manual_seed", "profiler", "recommended_max_memory",
    "seed", "set_per_process_memory_fraction", "set_rng_state", "synchronize", "torch",
)  # fmt: skip

RECOMMENDED_MAX = 16 << 30
DRIVER_CACHE = 4 << 20  # what the driver holds beyond the tensors


def _not_for_accel(name: str) -> Any:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"accel called torch.mps.{name}")

    return refuse


def fake_mps_module(name: str, backing: types.ModuleType | None = None) -> types.ModuleType:
    """``torch.mps`` as torch 2.13 has it, named ``torch.<name>``.

    Args:
        name: The module's device type.
        backing: A device module to take memory figures and the generator from.

    Returns:
        The module.
    """
    generator = backing.default_generators[0] if backing is not None else torch.Generator()
    allocated = (lambda: int(backing.memory_allocated(0))) if backing is not None else (
        lambda: 1 << 20
    )  # fmt: skip
    module = types.ModuleType(f"torch.{name}")
    functions: dict[str, Any] = {
        "_default_mps_generator": generator,
        "_get_default_mps_generator": lambda: generator,
        "_is_in_bad_fork": lambda: False,
        "current_allocated_memory": allocated,
        "driver_allocated_memory": lambda: allocated() + DRIVER_CACHE,
        "recommended_max_memory": lambda: RECOMMENDED_MAX,
        "device_count": lambda: 1,
        "is_available": lambda: True,
        "synchronize": lambda: None,
        "empty_cache": lambda: None,
        "manual_seed": lambda seed: generator.manual_seed(seed),
        "seed": lambda: generator.seed(),
        "get_rng_state": lambda device="mps": generator.get_state(),
        "set_rng_state": lambda new_state, device="mps": generator.set_state(new_state),
        "Tensor": torch.Tensor,
        "torch": torch,
    }
    for member in MPS_NAMES:
        setattr(module, member, functions.get(member, _not_for_accel(member)))
    return module
