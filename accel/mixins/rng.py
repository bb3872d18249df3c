"""RNGAPI implementations: through a ``torch.Generator`` per device, or a device module.

``GeneratorRNGMixin`` serves any backend that can name each device's default generator
(``HostRNGMixin`` is it for the host's single generator); ``TorchRNGMixin`` goes through
``torch.<type>`` seeding functions, which stay lazy before the device runtime starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable
from typing import ClassVar

import torch
from typing_extensions import Protocol

from accel._device_module import device_module
from accel._validate import check_index, check_optional_index, check_rng_state, check_seed
from accel.protocols._contract import implements
from accel.protocols.rng import RNGAPI, ForkRNGAPI


class _SavableRNG(Protocol):
    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor: ...
    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None: ...
    def device_count(self) -> int: ...


@contextlib.contextmanager
def fork_rng_states(
    rng: _SavableRNG, devices: Iterable[int] | None = None, enabled: bool = True
) -> Generator[None, None, None]:
    """``fork_rng`` from a backend's ``get/set_rng_state`` (any device type): the host's
    and ``devices``' (default: all) generators are restored on exit.

    Args:
        rng: The backend whose generators are saved and restored.
        devices: The device indices whose generators are restored with the host's; ``None``
            for every index below ``rng.device_count()``.
        enabled: ``False`` makes the context manager do nothing.

    Returns:
        The context manager. On entering it, an index in ``devices`` that is not an
        ``int`` raises ``TypeError`` and a negative one ``ValueError``.
    """
    if not enabled:
        yield
        return
    indices = (
        range(rng.device_count()) if devices is None
        else [check_index(d, "devices[]") for d in devices]
    )  # fmt: skip
    host = torch.get_rng_state()
    saved = [(index, rng.get_rng_state(index)) for index in indices]
    try:
        yield
    finally:
        # Devices first: on a host device they share the CPU generator, restored last.
        for index, state in saved:
            rng.set_rng_state(state, index)
        torch.set_rng_state(host)


@implements(ForkRNGAPI)
class ForkRNGMixin:
    """``fork_rng`` from the backend's own ``get/set_rng_state`` (any device type)."""

    def fork_rng(
        self: _SavableRNG, devices: Iterable[int] | None = None, enabled: bool = True
    ) -> contextlib.AbstractContextManager[None]:
        """Through :func:`fork_rng_states`, with this backend's ``get/set_rng_state``."""
        return fork_rng_states(self, devices, enabled)


class _GeneratorDevices(Protocol):
    def default_generator(self, device_index: int) -> torch.Generator: ...
    def current_device(self) -> int: ...
    def device_count(self) -> int: ...


def _generator(devices: _GeneratorDevices, device_index: int | None) -> torch.Generator:
    index = check_optional_index(device_index)
    return devices.default_generator(devices.current_device() if index is None else index)


@implements(RNGAPI)
class GeneratorRNGMixin(ForkRNGMixin):
    """Seeding and state through ``default_generator(i)``, which the backend provides.

    One implementation serves every device type: a ``torch.Generator`` has the same methods
    whatever device it draws for.
    """

    def manual_seed(self: _GeneratorDevices, seed: int) -> None:
        _generator(self, None).manual_seed(check_seed(seed))

    def manual_seed_all(self: _GeneratorDevices, seed: int) -> None:
        """Each distinct generator is seeded once."""
        value = check_seed(seed)
        generators = {id(g): g for g in map(self.default_generator, range(self.device_count()))}
        for generator in generators.values():
            generator.manual_seed(value)

    def initial_seed(self: _GeneratorDevices) -> int:
        return _generator(self, None).initial_seed()

    def get_rng_state(self: _GeneratorDevices, device_index: int | None = None) -> torch.Tensor:
        """Also raises what the backend's ``default_generator`` raises for the index."""
        return _generator(self, device_index).get_state()

    def set_rng_state(
        self: _GeneratorDevices, new_state: torch.Tensor, device_index: int | None = None
    ) -> None:
        """Also raises what the backend's ``default_generator`` raises for the index."""
        state = check_rng_state(new_state)
        generator = _generator(self, device_index)
        try:
            generator.set_state(state)
        except RuntimeError as error:
            raise ValueError(
                f"new_state is not a {generator.device.type} generator state: {error}"
            ) from error


@implements(RNGAPI)
class HostRNGMixin(GeneratorRNGMixin):
    """The host's single ``torch.default_generator`` behind every device index."""

    def default_generator(self, device_index: int) -> torch.Generator:
        """``torch.default_generator`` for every (checked) index: the host has one generator."""
        check_index(device_index)
        return torch.default_generator


@implements(RNGAPI)
class TorchRNGMixin(ForkRNGMixin):
    """RNGAPI for a torch device type.

    ``manual_seed`` goes through ``torch.<type>.manual_seed``, which queues the seed until
    the device runtime starts instead of starting it (seeding before ``fork()`` stays safe).
    """

    device_type: ClassVar[str]

    def _target(self, device_index: int | None) -> int | str:
        index = check_optional_index(device_index)
        return self.device_type if index is None else index

    def manual_seed(self, seed: int) -> None:
        device_module(self.device_type).manual_seed(check_seed(seed))

    def manual_seed_all(self, seed: int) -> None:
        device_module(self.device_type).manual_seed_all(check_seed(seed))

    def initial_seed(self) -> int:
        return int(device_module(self.device_type).initial_seed())

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        state: torch.Tensor = device_module(self.device_type).get_rng_state(
            self._target(device_index)
        )
        return state

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        state = check_rng_state(new_state)
        try:
            device_module(self.device_type).set_rng_state(state, self._target(device_index))
        except RuntimeError as error:
            raise ValueError(
                f"new_state is not a {self.device_type} generator state: {error}"
            ) from error

    def default_generator(self, device_index: int) -> torch.Generator:
        """``torch.<type>.default_generators[device_index]``; starts the device runtime if it has
        not started."""
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
