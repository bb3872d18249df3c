"""RNGAPI: seeds, states and generators."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from accel import functions
from accel.protocols import (
    RNGAPI,
    Accelerator,
)
from accel.testing._framework import check
from accel.testing.checks._helpers import holds, ill_typed, is_int, raises, seeds


def _draw(acc: Accelerator) -> torch.Tensor:
    device = acc.current_device_name()
    return torch.cat([torch.rand(8, device=device), torch.randn(8, device=device)]).cpu()


@check(RNGAPI, "manual_seed/initial_seed")
def seeds_are_deterministic(acc: Accelerator) -> None:
    """The same seed gives the same random numbers, and ``initial_seed()`` returns it modulo
    ``2**64``.
    """

    def body(seed: int) -> None:
        acc.manual_seed(seed)
        first = _draw(acc)
        acc.manual_seed(seed)
        assert torch.equal(first, _draw(acc)), "the same seed gave different random numbers"
        assert is_int(acc.initial_seed()), f"initial_seed()={acc.initial_seed()!r}, not an int"
        assert acc.initial_seed() == seed % 2**64, (
            f"initial_seed()={acc.initial_seed()} after manual_seed({seed})"
        )

    holds(body, seed=seeds)


@check(RNGAPI, "get_rng_state/set_rng_state")
def rng_state_round_trips(acc: Accelerator) -> None:
    """A state from ``get_rng_state()`` is a ``uint8`` CPU tensor and, restored with
    ``set_rng_state()``, reproduces the numbers drawn after it was saved.
    """

    def body(seed: int, skipped: int) -> None:
        acc.manual_seed(seed)
        for _ in range(skipped):
            _draw(acc)
        state = acc.get_rng_state()
        assert state.dtype == torch.uint8 and state.device.type == "cpu", (
            "get_rng_state() is not a uint8 CPU tensor"
        )
        expected = _draw(acc)
        _draw(acc)
        acc.set_rng_state(state)
        assert torch.equal(expected, _draw(acc)), (
            "a restored state did not reproduce the same numbers"
        )

    holds(body, seed=seeds, skipped=st.integers(min_value=0, max_value=3))


@check(RNGAPI, "manual_seed_all/default_generator")
def generators_follow_the_seeds(acc: Accelerator) -> None:
    """``manual_seed_all`` seeds every device's ``default_generator``, which is on the backend's
    device type and is the generator random ops use.
    """

    def body(seed: int) -> None:
        acc.manual_seed_all(seed)
        for index in range(acc.device_count()):
            got = acc.default_generator(index).initial_seed()
            assert got == seed % 2**64, (
                f"default_generator({index}).initial_seed()={got} after manual_seed_all({seed})"
            )

    holds(body, seed=seeds)
    generator = acc.default_generator(acc.current_device())
    assert generator.device.type == acc.device_name(), f"default generator is on {generator.device}"
    generator.manual_seed(1234)
    first = _draw(acc)
    acc.manual_seed(1234)
    assert torch.equal(first, _draw(acc)), "random ops do not use default_generator()"


@check(RNGAPI, "accel.fork_rng")
def fork_rng_restores_every_generator(acc: Accelerator) -> None:
    """Through the backend's own fork_rng where it has one (ForkRNGAPI).

    Numbers drawn inside ``accel.fork_rng()`` do not change what the device's and the host's
    generators give after the block; with ``enabled=False`` nothing is restored.
    """

    def body(seed: int, draws: int) -> None:
        acc.manual_seed(seed)
        host = torch.Generator().manual_seed(seed).get_state()
        torch.set_rng_state(host)
        expected, expected_host = _draw(acc), torch.rand(4)
        acc.manual_seed(seed)
        torch.set_rng_state(host)
        with functions.fork_rng(accelerator=acc):
            for _ in range(draws):
                _draw(acc)
                torch.rand(4)
        assert torch.equal(_draw(acc), expected), "numbers drawn inside fork_rng() leaked out"
        assert torch.equal(torch.rand(4), expected_host), "the host generator was not restored"
        acc.manual_seed(seed)
        with functions.fork_rng(enabled=False, accelerator=acc):
            _draw(acc)
        assert not torch.equal(_draw(acc), expected), "fork_rng(enabled=False) restored state"

    holds(body, seed=seeds, draws=st.integers(min_value=1, max_value=3))


@check(RNGAPI, "manual_seed/set_rng_state")
def bad_seeds_and_states_are_rejected(acc: Accelerator) -> None:
    """``manual_seed`` rejects out-of-range and non-``int`` seeds, and ``set_rng_state`` tensors
    that are not states, with an error naming the argument.
    """
    raises(ValueError, "seed", lambda: acc.manual_seed(2**64))
    raises(TypeError, "seed", lambda: ill_typed(acc).manual_seed("1"))
    raises(TypeError, "new_state", lambda: acc.set_rng_state(torch.zeros(16)))
    raises(ValueError, "new_state", lambda: acc.set_rng_state(torch.zeros(3, dtype=torch.uint8)))
