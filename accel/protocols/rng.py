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
        """Seed the current device's default generator."""
        ...

    def manual_seed_all(self, seed: int) -> None:
        """Seed the default generator of every device."""
        ...

    def initial_seed(self) -> int:
        """The seed of the current device's default generator, in ``[0, 2**64)``."""
        ...

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """A ``uint8`` CPU tensor holding the generator state (default: current device)."""
        ...

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        """Restore a state returned by :meth:`get_rng_state`."""
        ...

    def default_generator(self, device_index: int) -> torch.Generator:
        """The ``torch.Generator`` that random ops on that device use by default."""
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
        """Inside the ``with`` block, random numbers may be drawn freely: on exit the host's
        and the ``devices``' (default: all) generators are back where they were."""
        ...
