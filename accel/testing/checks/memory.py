"""Memory: current usage and sizes (MemoryUsageAPI), peaks (MemoryStatsAPI), free/total."""

from __future__ import annotations

import functools

import torch
from hypothesis import strategies as st

from accel.protocols import (
    Accelerator,
    AccumulatedStatsAPI,
    MemoryInfoAPI,
    MemoryStatsAPI,
    MemoryUsageAPI,
)
from accel.testing._framework import check
from accel.testing.checks._helpers import MiB, holds, is_int, raises


@check(MemoryStatsAPI, "max_memory_allocated/max_memory_reserved")
def peaks_are_never_below_current(acc: Accelerator) -> None:
    """With any few tensors alive, every peak is at least its current value, which is >= 0."""

    def body(sizes: list[int]) -> None:
        tensors = [
            torch.ones(size, dtype=torch.uint8, device=acc.current_device_name()) for size in sizes
        ]
        allocated = acc.memory_allocated()
        peak = acc.max_memory_allocated()
        assert is_int(peak), f"max_memory_allocated()={peak!r}: sizes are int bytes"
        assert peak >= allocated >= 0, (
            f"max_memory_allocated()={peak} < memory_allocated()={allocated}"
        )
        reserved = acc.memory_reserved()
        peak_reserved = acc.max_memory_reserved()
        assert is_int(peak_reserved), (
            f"max_memory_reserved()={peak_reserved!r}: sizes are int bytes"
        )
        assert peak_reserved >= reserved >= 0, (
            f"max_memory_reserved()={peak_reserved} < memory_reserved()={reserved}"
        )
        stats = acc.memory_stats()
        assert stats["allocated_bytes.all.peak"] >= stats["allocated_bytes.all.current"], (
            "memory_stats() peak < current"
        )
        del tensors

    holds(body, sizes=st.lists(st.integers(min_value=0, max_value=8 * MiB), max_size=4))


@check(MemoryStatsAPI, "max_memory_allocated/reset_peak_memory_stats")
def peak_is_real_and_resettable(acc: Accelerator) -> None:
    """A transient 256 MiB allocation shows in ``max_memory_allocated()`` (at least 90% of
    it above the baseline), and ``reset_peak_memory_stats()`` brings the peak down again.
    """
    size = 256 * MiB
    acc.reset_peak_memory_stats()
    baseline = acc.memory_allocated()
    transient = torch.ones(size, dtype=torch.uint8, device=acc.current_device_name())
    del transient
    peak = acc.max_memory_allocated()
    assert peak >= baseline + size * 0.9, (
        f"a {size} B allocation between two calls is missing from the peak ({peak} vs {baseline})"
    )
    acc.reset_peak_memory_stats()
    after = acc.max_memory_allocated()
    assert after < peak, f"reset_peak_memory_stats() left the peak at {after} (was {peak})"


@check(MemoryStatsAPI, "memory_stats")
def stats_have_torch_keys(acc: Accelerator) -> None:
    """``memory_stats()`` has ``allocated_bytes.all.current`` and
    ``allocated_bytes.all.peak``, and only ``int`` values."""
    stats = acc.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak"):
        assert key in stats, f"memory_stats() lacks {key!r}"
    assert all(is_int(v) for v in stats.values()), "memory_stats() has non-int values"


@check(MemoryUsageAPI, "total_memory/available_memory/empty_cache")
def sizes_are_consistent(acc: Accelerator) -> None:
    """The total memory is above 0 and at least the available memory (>= 0), the current
    sizes are ``int`` and >= 0, and ``empty_cache()`` leaves live tensors intact.
    """
    for name in ("memory_allocated", "memory_reserved"):
        value = getattr(acc, name)()
        assert is_int(value) and value >= 0, f"{name}()={value!r}: sizes are int bytes >= 0"
    total, available = acc.total_memory(), acc.available_memory()
    assert is_int(total) and is_int(available), "memory sizes must be int bytes"
    assert total >= available >= 0 and total > 0, (
        f"total_memory()={total}, available_memory()={available}"
    )
    live = torch.arange(1000, device=acc.current_device_name())
    acc.empty_cache()
    assert int(live.sum()) == 499500, "empty_cache() damaged a live tensor"


# Two reads of a size are not one atomic snapshot: another thread may allocate or free in
# between (on the host, the RSS moves with every page). Disagreements above this count.
_READ_SLACK = 16 * MiB


@check(MemoryUsageAPI, "memory_allocated/memory_reserved")
def usage_follows_a_live_tensor(acc: Accelerator) -> None:
    """While 256 MiB tensors live, ``memory_allocated()`` rises by at least 90% of one of
    them (an allocator that keeps freed memory may place up to three in it first), and
    ``memory_reserved()`` (used or cached) is not below ``memory_allocated()``.
    """
    size = 256 * MiB
    live: list[torch.Tensor] = []
    before = during = acc.memory_allocated()
    while len(live) < 4 and during < before + size * 0.9:
        live.append(torch.ones(size, dtype=torch.uint8, device=acc.current_device_name()))
        during = acc.memory_allocated()
    reserved = acc.memory_reserved()
    del live
    assert during >= before + size * 0.9, (
        f"memory_allocated() went from {before} to {during} while {4 * size} B of tensors lived"
    )
    assert reserved >= during - _READ_SLACK, (
        f"memory_reserved()={reserved} is below memory_allocated()={during}; reserved is "
        "what the allocator holds, used or cached"
    )


@check(MemoryStatsAPI, "memory_stats")
def stats_agree_with_the_members(acc: Accelerator) -> None:
    """``memory_stats()``'s ``allocated_bytes.all.current`` and ``.peak`` are what
    ``memory_allocated()`` and ``max_memory_allocated()`` say, read one after the other.
    """
    allocated, peak = acc.memory_allocated(), acc.max_memory_allocated()
    stats = acc.memory_stats()
    for key, value, member in (
        ("allocated_bytes.all.current", allocated, "memory_allocated"),
        ("allocated_bytes.all.peak", peak, "max_memory_allocated"),
    ):
        said = stats.get(key)
        assert isinstance(said, int) and abs(said - value) <= _READ_SLACK, (
            f"memory_stats()[{key!r}]={said!r}, but {member}()={value}"
        )


@check(AccumulatedStatsAPI, "reset_accumulated_memory_stats")
def accumulated_counters_reset(acc: Accelerator) -> None:
    """``reset_accumulated_memory_stats()`` leaves no ``*.allocated``/``*.freed`` counter above
    its old value and rejects a negative index.
    """
    assert isinstance(acc, AccumulatedStatsAPI)  # the kit runs this only on such backends

    def accumulated() -> dict[str, int]:
        return {k: v for k, v in acc.memory_stats().items() if k.endswith((".allocated", ".freed"))}

    before = accumulated()
    acc.reset_accumulated_memory_stats()
    after = accumulated()
    grown = [k for k, v in after.items() if v > before.get(k, 0)]
    assert not grown, f"reset_accumulated_memory_stats() left {grown} above their old values"
    raises(ValueError, "device_index", functools.partial(acc.reset_accumulated_memory_stats, -1))


@check(MemoryUsageAPI, "memory_* (device_index)")
def memory_rejects_bad_device_index(acc: Accelerator) -> None:
    """Every ``MemoryUsageAPI`` member that takes a device index rejects -1 with a
    ``ValueError`` naming ``device_index``.
    """
    for method in ("memory_allocated", "memory_reserved", "total_memory", "available_memory"):
        raises(ValueError, "device_index", functools.partial(getattr(acc, method), -1))


@check(MemoryStatsAPI, "max_memory_*/memory_stats (device_index)")
def stats_reject_bad_device_index(acc: Accelerator) -> None:
    """Every ``MemoryStatsAPI`` member rejects -1 with a ``ValueError`` naming
    ``device_index``.
    """
    for method in ("max_memory_allocated", "max_memory_reserved", "memory_stats",
                   "reset_peak_memory_stats"):  # fmt: skip
        raises(ValueError, "device_index", functools.partial(getattr(acc, method), -1))


@check(MemoryInfoAPI, "get_memory_info")
def memory_info_is_free_and_total(acc: Accelerator) -> None:
    """``get_memory_info()`` is ``(free, total)`` with ``0 <= free <= total`` and ``total``
    equal to ``total_memory()``; -1 raises a ``ValueError`` naming ``device_index``.
    """
    assert isinstance(acc, MemoryInfoAPI)  # the kit runs this only on such backends
    free, total = acc.get_memory_info()
    assert is_int(free) and is_int(total), "sizes must be int bytes"
    assert 0 <= free <= total, f"get_memory_info()=({free}, {total})"
    assert total == acc.total_memory(), f"total {total} != total_memory() {acc.total_memory()}"
    raises(ValueError, "device_index", functools.partial(acc.get_memory_info, -1))
