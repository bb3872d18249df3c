"""MemoryAPI: sizes are non-negative ints and peaks are real and never below current."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accel.protocols import Accelerator

MiB = 1 << 20


@given(sizes=st.lists(st.integers(min_value=0, max_value=8 * MiB), max_size=4))
def test_peaks_are_never_below_current(accelerator: Accelerator, sizes: list[int]) -> None:
    device = accelerator.current_device_name()
    tensors = [torch.ones(size, dtype=torch.uint8, device=device) for size in sizes]
    allocated = accelerator.memory_allocated()
    assert accelerator.max_memory_allocated() >= allocated >= 0
    reserved = accelerator.memory_reserved()
    assert accelerator.max_memory_reserved() >= reserved >= 0
    stats = accelerator.memory_stats()
    assert stats["allocated_bytes.all.peak"] >= stats["allocated_bytes.all.current"] >= 0
    del tensors


def test_peak_sees_an_allocation_nobody_asked_about(accelerator: Accelerator) -> None:
    # A transient 256 MiB buffer lives only between two calls; a sampled peak would miss it.
    size = 256 * MiB
    accelerator.reset_peak_memory_stats()
    baseline = accelerator.memory_allocated()
    transient = torch.ones(size, dtype=torch.uint8, device=accelerator.current_device_name())
    del transient
    assert accelerator.max_memory_allocated() >= baseline + size * 0.9


def test_reset_restarts_the_peak_from_current(accelerator: Accelerator) -> None:
    transient = torch.ones(128 * MiB, dtype=torch.uint8, device=accelerator.current_device_name())
    del transient
    before_reset = accelerator.max_memory_allocated()
    accelerator.reset_peak_memory_stats()
    after_reset = accelerator.max_memory_allocated()
    assert after_reset >= accelerator.memory_allocated() - 16 * MiB
    assert after_reset < before_reset


def test_stats_use_torch_key_names_with_int_values(accelerator: Accelerator) -> None:
    stats = accelerator.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak"):
        assert key in stats
    assert all(isinstance(value, int) for value in stats.values())


def test_total_bounds_available(accelerator: Accelerator) -> None:
    total = accelerator.total_memory()
    available = accelerator.available_memory()
    assert isinstance(total, int)
    assert isinstance(available, int)
    assert total >= available >= 0
    assert total > 0


def test_empty_cache_keeps_live_tensors_intact(accelerator: Accelerator) -> None:
    live = torch.arange(1000, device=accelerator.current_device_name())
    accelerator.empty_cache()
    assert int(live.sum()) == 999 * 1000 // 2


@pytest.mark.parametrize(
    "method",
    [
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
        "memory_stats",
        "reset_peak_memory_stats",
        "total_memory",
        "available_memory",
    ],
)
def test_bad_device_index_is_rejected(accelerator: Accelerator, method: str) -> None:
    with pytest.raises(ValueError, match="device_index"):
        getattr(accelerator, method)(-1)
