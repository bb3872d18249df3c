"""Apple's MPS, driven by a stand-in for ``torch.mps`` with exactly torch 2.13's names.

Not run on Apple hardware here: the stand-in (tests/support/fake_mps.py) is what these
tests know of the device. In-process tests register it under an unused torch device type;
the kit runs in a fresh interpreter on a CPU-backed fake device (tensors need one).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import ClassVar

import pytest
import torch

import accel
from accel.backends.devices import MPSAccelerator
from accel.protocols import (
    RNGAPI,
    Accelerator,
    CapabilityError,
    CoreAccelerator,
    DeviceAPI,
    DTypeAPI,
    GraphAPI,
    MemoryAPI,
    MemoryInfoAPI,
    MemoryStatsAPI,
    MemoryUsageAPI,
    RuntimeAPI,
    StreamAPI,
    TensorAPI,
    missing_members,
    supports_memory_stats,
)
from tests.support import TESTS
from tests.support.fake_mps import DRIVER_CACHE, MPS_NAMES, RECOMMENDED_MAX, fake_mps_module

STAND_IN = "maia"  # a torch device type nothing here uses


@pytest.fixture
def mps(fresh_selection: None) -> Iterator[MPSAccelerator]:
    torch._register_device_module(STAND_IN, fake_mps_module(STAND_IN))

    class FakeMPS(MPSAccelerator):
        device_type: ClassVar[str] = STAND_IN

    yield FakeMPS()
    delattr(torch, STAND_IN)
    sys.modules.pop(f"torch.{STAND_IN}", None)


class _GenericStats:
    """``torch.accelerator``'s generic statistics as torch 2.13 keeps them for MPS."""

    def __init__(self, initialized: bool = True) -> None:
        self.peak_allocated, self.peak_reserved = 5 << 20, 6 << 20
        self.calls: list[tuple[str, object]] = []
        self.initialized = initialized  # torch answers {} until the allocator is used

    def memory_stats(self, device_index: object = None) -> dict[str, object]:
        self.calls.append(("memory_stats", device_index))
        if not self.initialized:
            return {}
        return {
            "allocated_bytes.all.current": 1 << 20, "allocated_bytes.all.peak": self.peak_allocated,
            "reserved_bytes.all.current": 3 << 20, "reserved_bytes.all.peak": self.peak_reserved,
            "fraction": 0.5,
        }  # fmt: skip

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        generic = torch.accelerator
        monkeypatch.setattr(generic, "current_accelerator", lambda *_: torch.device(STAND_IN))
        monkeypatch.setattr(generic, "memory_stats", self.memory_stats)
        monkeypatch.setattr(generic, "max_memory_allocated", lambda i=None: self.peak_allocated)
        monkeypatch.setattr(generic, "max_memory_reserved", lambda i=None: self.peak_reserved)
        monkeypatch.setattr(generic, "memory_reserved", lambda i=None: 3 << 20)
        monkeypatch.setattr(generic, "reset_peak_memory_stats", self._reset_peaks)
        monkeypatch.setattr(
            generic, "reset_accumulated_memory_stats",
            lambda i=None: self.calls.append(("reset_accumulated", i)),
        )  # fmt: skip

    def _reset_peaks(self, device_index: object = None) -> None:
        self.calls.append(("reset_peaks", device_index))
        self.peak_allocated, self.peak_reserved = 1 << 20, 3 << 20


@pytest.fixture
def mps_with_peaks(
    fresh_selection: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[MPSAccelerator, _GenericStats]]:
    torch._register_device_module(STAND_IN, fake_mps_module(STAND_IN))
    stats = _GenericStats()
    stats.install(monkeypatch)

    class FakeMPS(MPSAccelerator):
        device_type: ClassVar[str] = STAND_IN

    yield FakeMPS(), stats
    delattr(torch, STAND_IN)
    sys.modules.pop(f"torch.{STAND_IN}", None)


def test_mps_takes_peaks_from_torchs_generic_statistics_where_torch_keeps_them(
    mps_with_peaks: tuple[MPSAccelerator, _GenericStats],
) -> None:
    mps, stats = mps_with_peaks
    assert isinstance(mps, Accelerator)
    assert isinstance(mps, MemoryStatsAPI)
    assert supports_memory_stats(mps)
    assert mps.max_memory_allocated() == 5 << 20
    assert mps.max_memory_reserved(0) == 6 << 20
    # Reserved is the allocator's own figure, so it never passes its peak.
    assert mps.memory_reserved() == 3 << 20 <= mps.max_memory_reserved()
    assert mps.memory_stats() == {
        "allocated_bytes.all.current": 1 << 20, "allocated_bytes.all.peak": 5 << 20,
        "reserved_bytes.all.current": 3 << 20, "reserved_bytes.all.peak": 6 << 20,
    }  # fmt: skip
    mps.reset_peak_memory_stats()
    assert mps.max_memory_allocated() == 1 << 20
    accel.reset_accumulated_memory_stats(accelerator=mps)
    assert ("reset_peaks", None) in stats.calls
    assert ("reset_accumulated", None) in stats.calls
    expected = rf"^device_index must be below device_count\(\) = 1 for {STAND_IN}, got 1$"
    for call in (mps.max_memory_allocated, mps.max_memory_reserved, mps.memory_stats,
                 mps.reset_peak_memory_stats, mps.reset_accumulated_memory_stats):  # fmt: skip
        with pytest.raises(ValueError, match=expected):
            call(1)
    # What is left of the budget still counts everything the Metal driver holds.
    assert mps.available_memory() <= RECOMMENDED_MAX - (1 << 20) - DRIVER_CACHE


def test_peaks_are_found_before_the_allocator_was_first_used(
    fresh_selection: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch.accelerator.memory_stats() is {} until the device's allocator is first used,
    # which a backend made before the first tensor (the usual order) comes before.
    from accel.mixins import memory

    torch._register_device_module(STAND_IN, fake_mps_module(STAND_IN))
    stats = _GenericStats(initialized=False)
    stats.install(monkeypatch)
    touched: list[str] = []

    def first_use(device_type: str) -> None:
        touched.append(device_type)
        stats.initialized = True

    monkeypatch.setattr(memory, "_touch_allocator", first_use)
    try:
        assert isinstance(_PicklableMPS(), MemoryStatsAPI)
        assert touched == [STAND_IN]
        monkeypatch.setattr(torch.accelerator, "memory_stats", _raise_type_error)
        # Whatever torch raises there, the backend is still made, without peaks.
        assert not isinstance(_PicklableMPS(), MemoryStatsAPI)
    finally:
        delattr(torch, STAND_IN)
        sys.modules.pop(f"torch.{STAND_IN}", None)


def _raise_type_error(device_index: object = None) -> dict[str, object]:
    raise TypeError("an older torch's signature")


class _PicklableMPS(MPSAccelerator):
    device_type: ClassVar[str] = STAND_IN


def test_the_class_without_peaks_pickles_and_subclasses_as_the_one_chosen(
    fresh_selection: None,
) -> None:
    import copy
    import pickle

    torch._register_device_module(STAND_IN, fake_mps_module(STAND_IN))
    try:
        acc = _PicklableMPS()
        assert not isinstance(acc, MemoryStatsAPI)  # no generic statistics here
        again = pickle.loads(pickle.dumps(acc))
        assert type(again) is type(acc)
        assert isinstance(again, _PicklableMPS)
        assert type(copy.deepcopy(acc)) is type(acc)
        assert type(acc).instance_classes() == (type(acc), type(acc))

        class Further(type(acc)):  # type: ignore[misc]
            pass

        assert not isinstance(Further(), MemoryStatsAPI)
        with pytest.raises(RuntimeError, match="not a MemoryStatsAPI"):  # as torch raises
            accel.max_memory_allocated(accelerator=acc)  # type: ignore[arg-type]
    finally:
        delattr(torch, STAND_IN)
        sys.modules.pop(f"torch.{STAND_IN}", None)


def test_mps_has_no_streams_to_order_so_it_is_a_synchronized_device(mps: MPSAccelerator) -> None:
    # One in-order queue: DeepSpeed 0.19's MPS backend answers True for the same reason.
    assert not isinstance(mps, StreamAPI)
    assert mps.is_synchronized_device() is True
    with pytest.raises(CapabilityError, match="one queue on MPS"):
        mps.Event  # noqa: B018


def test_deepspeed_hears_what_its_own_mps_backend_says(mps: MPSAccelerator) -> None:
    pytest.importorskip("deepspeed")
    from deepspeed.accelerator.mps_accelerator import MPS_Accelerator

    from accel.integrations.deepspeed.adapter import AccelDeepSpeedAccelerator

    adapter = AccelDeepSpeedAccelerator(mps)  # type: ignore[arg-type]  # a CoreAccelerator
    native = object.__new__(MPS_Accelerator)  # its answers need no Mac
    for name in ("is_synchronized_device", "use_host_timers", "resolves_data_dependency",
                 "handles_memory_backpressure"):  # fmt: skip
        assert getattr(adapter, name)() == getattr(native, name)(), name


def test_the_stand_in_has_exactly_torchs_mps_names() -> None:
    installed = [n for n in dir(torch.mps) if not (n.startswith("__") and n.endswith("__"))]
    assert tuple(installed) == MPS_NAMES


def test_mps_has_what_its_module_has_and_not_peak_statistics(mps: MPSAccelerator) -> None:
    assert mps.probe().available
    for protocol in (CoreAccelerator, DeviceAPI, RNGAPI, MemoryUsageAPI, DTypeAPI, TensorAPI,
                     RuntimeAPI, MemoryInfoAPI):  # fmt: skip
        assert isinstance(mps, protocol), protocol
    for protocol in (MemoryStatsAPI, MemoryAPI, Accelerator, StreamAPI, GraphAPI):
        assert not isinstance(mps, protocol), protocol
    assert not supports_memory_stats(mps)
    # Declared absent, so still a backend: selection, set_accelerator and the kit take it.
    assert missing_members(mps) == []
    accel.set_accelerator(mps)  # type: ignore[arg-type]  # a CoreAccelerator
    assert accel.get_accelerator() is mps


def test_one_device(mps: MPSAccelerator) -> None:
    assert mps.device_count() == 1
    mps.set_device(0)
    mps.set_device(f"{STAND_IN}:0")
    assert mps.current_device() == 0
    assert mps.current_device_name() == f"{STAND_IN}:0"
    expected = rf"^device_index must be below device_count\(\) = 1 for {STAND_IN}, got 1$"
    with pytest.raises(ValueError, match=expected):
        mps.set_device(1)
    for call in (mps.memory_allocated, mps.memory_reserved, mps.total_memory,
                 mps.available_memory, mps.get_memory_info, mps.synchronize):  # fmt: skip
        with pytest.raises(ValueError, match=expected):
            call(1)
    with pytest.raises(ValueError, match=expected):
        mps.default_generator(1)
    with pytest.raises(ValueError, match=expected):
        accel.get_memory_info(1, mps)  # type: ignore[arg-type]


def test_memory_figures_come_from_the_module(mps: MPSAccelerator) -> None:
    assert mps.memory_allocated() == 1 << 20
    assert mps.memory_reserved() == (1 << 20) + DRIVER_CACHE
    assert mps.total_memory(0) == RECOMMENDED_MAX
    free, total = mps.get_memory_info()
    assert total == RECOMMENDED_MAX
    assert 0 <= free <= RECOMMENDED_MAX - (1 << 20) - DRIVER_CACHE
    assert accel.get_memory_info(accelerator=mps) == (mps.available_memory(), total)  # type: ignore[arg-type]


def test_peak_statistics_raise_naming_the_capability(mps: MPSAccelerator) -> None:
    for name in ("max_memory_allocated", "max_memory_reserved", "memory_stats",
                 "reset_peak_memory_stats"):  # fmt: skip
        with pytest.raises(CapabilityError, match=(
            rf"^FakeMPS has no {name}: it is not a MemoryStatsAPI \(the device's runtime keeps "
            r"no peak memory statistics\); check isinstance\(acc, MemoryStatsAPI\) or "
            r"accel.protocols.supports_memory_stats\(acc\) first$"
        )):  # fmt: skip
            getattr(mps, name)
        assert not hasattr(mps, name)
    with pytest.raises(CapabilityError, match="has no reset_accumulated_memory_stats"):
        accel.reset_accumulated_memory_stats(accelerator=mps)  # type: ignore[arg-type]


def test_seeding_goes_through_the_devices_generator(mps: MPSAccelerator) -> None:
    mps.manual_seed_all(123)
    assert mps.initial_seed() == 123
    state = mps.get_rng_state()
    first = torch.rand(4, generator=mps.default_generator(0))
    mps.set_rng_state(state, 0)
    assert torch.equal(torch.rand(4, generator=mps.default_generator(0)), first)


def test_accel_report_shows_the_partial_capabilities() -> None:
    from accel.report import collect, render

    row = {row.name: row for row in collect().backends}["mps"]
    assert not row.available
    assert row.reason == "torch.mps.is_available() is False"  # no longer "lacks ..."
    assert row.capabilities["MemoryUsageAPI"] is True
    # Peaks are decided when the backend is made (whether torch keeps them for MPS).
    assert row.capabilities["MemoryStatsAPI"] is None
    assert row.capabilities["MemoryAPI"] is None
    assert row.capabilities["DeviceAPI"] is True
    assert row.capabilities["StreamAPI"] is False
    assert "MemoryStatsAPI" in render(collect())


KIT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {support!r})
    import torch
    import fake_device, fake_mps
    backing = fake_device.install("mpsfake")
    torch.mpsfake = fake_mps.fake_mps_module("mpsfake", backing)  # torch.mps's shape
    from accel.backends.devices import MPSAccelerator
    from accel.testing import check_backend

    class FakeMPS(MPSAccelerator):
        device_type = "mpsfake"

    acc = FakeMPS()
    report = check_backend(acc, max_examples=8)
    before = acc.memory_allocated()
    x = torch.ones(1 << 20, dtype=torch.uint8, device=acc.current_device_name())
    print(json.dumps({{"report": str(report), "protocols": report.protocols,
                      "device": str(x.device), "grew": acc.memory_allocated() - before}}))
    """
)


@pytest.mark.slow
def test_the_kit_passes_on_mps() -> None:
    code = KIT.format(support=str(TESTS / "support"))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    report = answer["report"]
    # The one promise the CPU-backed fake device cannot keep (see test_fake_device.py).
    assert "1 violation(s)" in report, report
    assert "TensorAPI.on_accelerator/pin_memory/is_pinned" in report, report
    assert set(answer["protocols"]) >= {"DeviceAPI", "RNGAPI", "MemoryUsageAPI", "DTypeAPI",
                                        "TensorAPI", "RuntimeAPI", "MemoryInfoAPI"}  # fmt: skip
    assert not {"MemoryAPI", "MemoryStatsAPI", "StreamAPI", "GraphAPI"} & set(answer["protocols"])
    assert answer["device"] == "mpsfake:0"
    assert answer["grew"] == 1 << 20
