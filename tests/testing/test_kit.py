"""The conformance kit rejects each deliberately broken backend with a useful message."""

from __future__ import annotations

from typing import Any

import pytest

import accel
from accel.backends.cpu import CPUAccelerator
from accel.protocols import GraphAPI, StreamAPI
from accel.testing import check_backend
from tests.support import broken_backends as broken
from tests.support.first_release import typed_module

CASES = [
    (broken.LeakyRNGState, "RNGAPI", "rng_state_round_trips", "did not reproduce", True),
    (broken.DriftingSeed, "RNGAPI", "seeds_are_deterministic", "same seed gave different", True),
    (broken.LowPeak, "MemoryStatsAPI", "peaks_are_never_below_current", "max_memory_allocated()=", True),
    (broken.MisnamedDevice, "DeviceAPI", "device_name_agrees_with_device", "but device(", True),
    (broken.OverclaimedDTypes, "DTypeAPI", "dtype_answers_agree", "disagrees with is_fp16_supported", False),
    (broken.StubbedProfiler, "ProfilerAPI", "profiler_ranges_nest", "raised NotImplementedError", True),
    (broken.NoneForMemory, "MemoryAPI", "members_are_real", "total_memory() returned None", False),
    (broken.HalfAGraphAPI, "GraphAPI", "no_partial_capabilities", "create_graph callable", False),
    (broken.BackwardsClock, "StreamAPI", "event_timing_is_never_negative", "is -0.5", True),
    (broken.RenamedParameter, "MemoryUsageAPI", "members_take_the_protocols_arguments", "refuses device_index= by name", False),
    (broken.InstanceCapability, "HostCacheAPI", "members_belong_to_the_class", "empty_host_cache set on the instance", False),
    (broken.FrozenUsage, "MemoryUsageAPI", "usage_follows_a_live_tensor", "memory_allocated() went from 4096 to 4096", False),
    (broken.ReservedBelowAllocated, "MemoryUsageAPI", "usage_follows_a_live_tensor", "memory_reserved()=0 is below", False),
    (broken.UnrelatedStats, "MemoryStatsAPI", "stats_agree_with_the_members", "['allocated_bytes.all.current']=7", False),
    (broken.ExportsWithoutAccel, "RuntimeAPI", "runtime_answers", "ACCEL comes first", False),
    (broken.NeverDoneStreams, "StreamAPI", "synchronizing_completes_work", "Stream.query() is False after", True),
    (broken.FrozenGraph, "GraphAPI", "graph_replay_recomputes", "output is 1.0, not 3.0", True),
    (broken.LenientIndex, "DeviceAPI", "bad_device_index_is_rejected", "nothing was raised", False),
    (broken.FloatPeak, "MemoryStatsAPI", "peaks_are_never_below_current", "sizes are int bytes", True),
    (broken.BoolReserved, "MemoryUsageAPI", "sizes_are_consistent", "memory_reserved()=True", False),
    (broken.FloatSeed, "RNGAPI", "seeds_are_deterministic", "not an int", True),
    (broken.WordyPinned, "TensorAPI", "tensor_placement_and_staging", "is 'yes', not True", True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("backend", "protocol", "check", "message", "has_counterexample"),
    CASES,
    ids=lambda c: getattr(c, "__name__", None),
)
def test_each_broken_backend_is_rejected_with_its_violation(
    backend: type, protocol: str, check: str, message: str, has_counterexample: bool
) -> None:
    report = check_backend(backend, max_examples=10)
    assert not report.ok
    found = [v for v in report.violations if v.protocol == protocol and v.check == check]
    assert found, str(report)
    assert message in found[0].message, str(found[0])
    if has_counterexample:  # properties report hypothesis's minimal failing input
        assert found[0].counterexample, str(found[0])
    assert f"{protocol}." in str(report)


def test_real_cpu_backend_passes() -> None:
    report = check_backend(CPUAccelerator)
    assert report.ok, str(report)
    assert "OpBuilderAPI" in report.protocols
    assert report.checks_run >= 25


def test_a_backend_without_peaks_composed_as_the_docs_say_passes(fresh_selection: None) -> None:
    # tests/typing/pass/partial_memory_backend.py: NoMemoryStatsMixin and the usage-only
    # host mixin, which mypy --strict and basedpyright accept as a CoreAccelerator.
    device = typed_module("partial_memory_backend").NoPeaksDevice
    report = check_backend(device, max_examples=5)
    assert report.ok, str(report)
    assert "MemoryUsageAPI" in report.protocols
    assert "MemoryStatsAPI" not in report.protocols
    accel.set_accelerator(device())
    assert type(accel.get_accelerator()) is device


def test_an_honest_fake_stream_backend_passes_the_stream_checks() -> None:
    # Proves the stream checks can pass, so BackwardsClock fails for its clock alone.
    assert isinstance(broken.FakeStreams(), StreamAPI)
    report = check_backend(broken.FakeStreams, max_examples=5)
    assert report.ok, str(report)


def test_capabilities_are_decided_by_isinstance() -> None:
    assert isinstance(broken.FrozenGraph(), GraphAPI)
    assert "GraphAPI" in check_backend(broken.FrozenGraph, max_examples=5).protocols
    assert "GraphAPI" not in check_backend(CPUAccelerator, max_examples=5).protocols


def test_bad_arguments_to_the_kit_are_errors_not_violations() -> None:
    # A budget of 0 or "5" made every property report the backend as broken.
    for budget in (0, -1, "5", True, 2.0):
        with pytest.raises(ValueError, match=f"max_examples must be an int >= 1, got {budget!r}"):
            check_backend(CPUAccelerator, max_examples=budget)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a backend class or instance, got str 'cpu'"):
        check_backend("cpu")  # type: ignore[arg-type]

    class SaysTrue(CPUAccelerator):
        @classmethod
        def probe(cls) -> Any:
            return True

    with pytest.raises(TypeError, match=r"SaysTrue.probe\(\) returned bool True, expected"):
        check_backend(SaysTrue)


def test_a_backend_without_devices_gets_that_one_violation() -> None:
    # The checks that draw device indices below the count reported the kit's own errors
    # (ZeroDivisionError, hypothesis's InvalidArgument) beside it.
    report = check_backend(broken.NoDevices)
    assert [v.message for v in report.violations] == [
        "device_count()=0 on an available backend; no check can run"
    ]


def test_unavailable_backend_class_is_an_error_with_the_reason() -> None:
    from accel.backends.cuda import CUDAAccelerator

    if CUDAAccelerator.probe().available:
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="CUDAAccelerator is not available here: "):
        check_backend(CUDAAccelerator)
