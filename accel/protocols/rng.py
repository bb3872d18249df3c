"""RNGAPI: seeding and saving the random number generators of the accelerator."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol

if TYPE_CHECKING:
    import torch


@fast_protocol
@runtime_checkable
class RNGAPI(Protocol):
    """The device's default random generators.

    Seeds are ``int`` in ``[-2**63, 2**64)``, as torch accepts them. A state saved with
    :meth:`get_rng_state` and restored with :meth:`set_rng_state` reproduces the same
    random numbers.
    """

    def manual_seed(self, seed: int) -> None:
        """Seed the current device's default generator.

        Args:
            seed: An ``int`` in ``[-2**63, 2**64)``.

        Raises:
            TypeError: ``seed`` is not an ``int``.
            ValueError: ``seed`` is out of range.
        """
        ...

    def manual_seed_all(self, seed: int) -> None:
        """Seed the default generator of every device, as :meth:`manual_seed` seeds one.

        Args:
            seed: As for :meth:`manual_seed`, which also says what it raises.
        """
        ...

    def initial_seed(self) -> int:
        """The seed of the current device's default generator.

        Returns:
            The seed, in ``[0, 2**64)``.
        """
        ...

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """Save a device's generator state.

        Returns:
            The state as a 1-D ``uint8`` CPU tensor.
        """
        ...

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        """Restore a state returned by :meth:`get_rng_state`.

        Args:
            new_state: The saved state.

        Raises:
            TypeError: ``new_state`` is not a 1-D ``uint8`` CPU tensor.
            ValueError: ``new_state`` is not a state of this device type's generator.
        """
        ...

    def default_generator(self, device_index: int) -> torch.Generator:
        """The ``torch.Generator`` that random ops on a device use by default.

        Args:
            device_index: The device.

        Returns:
            The device's default generator.

        Raises:
            ValueError: ``device_index`` is negative or, where each device has its own
                generator, at or beyond the number of devices.
        """
        ...


@fast_protocol
@runtime_checkable
class ForkRNGAPI(Protocol):
    """A backend's own ``fork_rng`` (since API version 2).

    Optional: ``accel.fork_rng()`` works with every backend, through this member where a
    backend has it and through :meth:`RNGAPI.get_rng_state`/``set_rng_state`` otherwise.
    """

    def fork_rng(
        self, devices: Iterable[int] | None = None, enabled: bool = True
    ) -> AbstractContextManager[None]:
        """Draw random numbers freely inside the ``with`` block; the generators come back after.

        Args:
            devices: The device indices whose generators are saved; ``None`` for all.
            enabled: ``False`` makes the context manager do nothing.

        Returns:
            A context manager that restores the host's and ``devices``' generators on exit.

        Raises:
            TypeError: An index in ``devices`` is not an ``int``.
            ValueError: An index in ``devices`` is negative.
        """
        ...
