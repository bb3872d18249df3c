"""RNG operations expressed through each device's default ``torch.Generator``."""

from __future__ import annotations

import torch
from typing_extensions import Protocol

from accel._checks import check_optional_index, check_rng_state, check_seed


class _GeneratorDevices(Protocol):
    def default_generator(self, device_index: int) -> torch.Generator: ...
    def current_device(self) -> int: ...
    def device_count(self) -> int: ...


def _generator(devices: _GeneratorDevices, device_index: int | None) -> torch.Generator:
    index = check_optional_index(device_index)
    return devices.default_generator(devices.current_device() if index is None else index)


class GeneratorRNGMixin:
    """Seeding and state through ``default_generator(i)``, which the backend provides.

    One implementation serves every device type: a ``torch.Generator`` has the same methods
    whatever device it draws for.
    """

    def manual_seed(self: _GeneratorDevices, seed: int) -> None:
        """Seed the current device's default generator."""
        _generator(self, None).manual_seed(check_seed(seed))

    def manual_seed_all(self: _GeneratorDevices, seed: int) -> None:
        """Seed the default generator of every device (each generator once)."""
        value = check_seed(seed)
        generators = {id(g): g for g in map(self.default_generator, range(self.device_count()))}
        for generator in generators.values():
            generator.manual_seed(value)

    def initial_seed(self: _GeneratorDevices) -> int:
        """The current device generator's seed, in ``[0, 2**64)``."""
        return _generator(self, None).initial_seed()

    def get_rng_state(self: _GeneratorDevices, device_index: int | None = None) -> torch.Tensor:
        """A copy of the generator state as a ``uint8`` CPU tensor."""
        return _generator(self, device_index).get_state()

    def set_rng_state(
        self: _GeneratorDevices, new_state: torch.Tensor, device_index: int | None = None
    ) -> None:
        """Restore a state from :meth:`get_rng_state` of the same device type."""
        state = check_rng_state(new_state)
        generator = _generator(self, device_index)
        try:
            generator.set_state(state)
        except RuntimeError as error:
            raise ValueError(
                f"new_state is not a {generator.device.type} generator state: {error}"
            ) from error
