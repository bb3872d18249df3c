"""RNGAPI: seeds are deterministic and saved states reproduce the same numbers."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accel.protocols import Accelerator

seeds = st.integers(min_value=-(2**63), max_value=2**64 - 1)


def _draw(accelerator: Accelerator) -> torch.Tensor:
    device = accelerator.current_device_name()
    return torch.cat([torch.rand(8, device=device), torch.randn(8, device=device)]).cpu()


@given(seed=seeds)
def test_same_seed_gives_same_numbers(accelerator: Accelerator, seed: int) -> None:
    accelerator.manual_seed(seed)
    first = _draw(accelerator)
    accelerator.manual_seed(seed)
    assert torch.equal(first, _draw(accelerator))
    assert accelerator.initial_seed() == seed % 2**64


@given(seed=seeds, skipped=st.integers(min_value=0, max_value=5))
def test_state_round_trip_reproduces_numbers(
    accelerator: Accelerator, seed: int, skipped: int
) -> None:
    accelerator.manual_seed(seed)
    for _ in range(skipped):
        _draw(accelerator)
    state = accelerator.get_rng_state()
    expected = _draw(accelerator)
    _draw(accelerator)  # move on, then go back
    accelerator.set_rng_state(state)
    assert torch.equal(expected, _draw(accelerator))


@given(seed=seeds)
def test_manual_seed_all_seeds_every_device(accelerator: Accelerator, seed: int) -> None:
    accelerator.manual_seed_all(seed)
    for index in range(accelerator.device_count()):
        assert accelerator.default_generator(index).initial_seed() == seed % 2**64


def test_default_generator_is_the_one_random_ops_use(accelerator: Accelerator) -> None:
    generator = accelerator.default_generator(accelerator.current_device())
    assert isinstance(generator, torch.Generator)
    assert generator.device.type == accelerator.device_name()
    generator.manual_seed(1234)
    first = _draw(accelerator)
    accelerator.manual_seed(1234)
    assert torch.equal(first, _draw(accelerator))


def test_states_are_uint8_cpu_tensors(accelerator: Accelerator) -> None:
    state = accelerator.get_rng_state()
    assert state.dtype == torch.uint8
    assert state.device.type == "cpu"


@pytest.mark.parametrize(
    ("seed", "error"), [(2**64, ValueError), (-(2**63) - 1, ValueError), ("1", TypeError)]
)
def test_bad_seed_is_rejected(
    accelerator: Accelerator, seed: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="seed"):
        accelerator.manual_seed(seed)  # type: ignore[arg-type]
    with pytest.raises(error, match="seed"):
        accelerator.manual_seed_all(seed)  # type: ignore[arg-type]


def test_bad_state_is_rejected_with_its_name(accelerator: Accelerator) -> None:
    with pytest.raises(TypeError, match="new_state"):
        accelerator.set_rng_state(torch.zeros(16))
    with pytest.raises(TypeError, match="new_state"):
        accelerator.set_rng_state([1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="new_state"):
        accelerator.set_rng_state(torch.zeros(3, dtype=torch.uint8))
