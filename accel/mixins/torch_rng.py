"""RNG through the device module's seeding functions, which stay lazy before device init."""

from __future__ import annotations

from typing import ClassVar

import torch

from accel._checks import check_index, check_optional_index, check_rng_state, check_seed
from accel.mixins.torch_device import device_module


class TorchRNGMixin:
    """RNGAPI for a torch device type.

    ``manual_seed`` goes through ``torch.<type>.manual_seed``, which queues the seed until
    the device runtime starts instead of starting it (seeding before ``fork()`` stays safe).
    """

    device_type: ClassVar[str]

    def _target(self, device_index: int | None) -> int | str:
        index = check_optional_index(device_index)
        return self.device_type if index is None else index

    def manual_seed(self, seed: int) -> None:
        """Seed the current device's default generator."""
        device_module(self.device_type).manual_seed(check_seed(seed))

    def manual_seed_all(self, seed: int) -> None:
        """Seed the default generator of every device."""
        device_module(self.device_type).manual_seed_all(check_seed(seed))

    def initial_seed(self) -> int:
        """The current device generator's seed."""
        return int(device_module(self.device_type).initial_seed())

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """The generator state of a device (default: current) as a uint8 CPU tensor."""
        state: torch.Tensor = device_module(self.device_type).get_rng_state(
            self._target(device_index)
        )
        return state

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        """Restore a state from :meth:`get_rng_state`."""
        state = check_rng_state(new_state)
        try:
            device_module(self.device_type).set_rng_state(state, self._target(device_index))
        except RuntimeError as error:
            raise ValueError(
                f"new_state is not a {self.device_type} generator state: {error}"
            ) from error

    def default_generator(self, device_index: int) -> torch.Generator:
        """The default generator of a device (starts the device runtime if needed)."""
        index = check_index(device_index)
        module = device_module(self.device_type)
        generators: tuple[torch.Generator, ...] = tuple(module.default_generators)
        if not generators and hasattr(module, "init"):
            module.init()  # default_generators is filled by the runtime's start
            generators = tuple(module.default_generators)
        if index >= len(generators):
            raise ValueError(
                f"device_index must be below {len(generators)} for {self.device_type}, got {index}"
            )
        return generators[index]
