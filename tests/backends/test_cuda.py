"""CUDA logic that needs no GPU: visible-device parsing, NVML mapping, gates, the probe."""

from __future__ import annotations

import pytest
import torch

from accel.backends import _cuda_visible, cuda
from accel.backends.cuda import CUDAAccelerator
from accel.protocols import GraphAPI, ProfilerAPI, StreamAPI
from tests.support.fakes import FakeNVML

GPUS = [
    "GPU-8a1f0000-0000-0000-0000-000000000000",
    "GPU-8b2e0000-0000-0000-0000-000000000000",
    "GPU-c3d40000-0000-0000-0000-000000000000",
]
MIGS = {2: ["MIG-11110000-0000-0000-0000-000000000000", "MIG-22220000-0000-0000-0000-000000000000"]}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("", []),
        ("-1", []),
        ("0", [0]),
        ("2,0", [2, 0]),
        (" 1 , 0 ", [1, 0]),
        ("1,-1,0", [1]),
        ("0,0", []),
        ("1gpu,2", [1, 2]),
        ("x,1", []),
        ("GPU-8a1f,GPU-c3d4", ["GPU-8a1f", "GPU-c3d4"]),
        (" GPU-8a1f , 1", ["GPU-8a1f"]),
        ("MIG-1111", ["MIG-1111"]),
        ("GPU-8a,GPU-8a", []),
    ],
)
def test_visible_devices_parse_like_cuda(raw: str | None, expected: list[int | str] | None) -> None:
    assert _cuda_visible.parse_visible_devices(raw) == expected


@pytest.mark.parametrize(
    ("raw", "torch_index", "handle"),
    [
        (None, 1, ("gpu", 1)),
        ("2,0", 0, ("gpu", 2)),
        ("2,0", 1, ("gpu", 0)),
        (" 1 , 2 ", 1, ("gpu", 2)),
        (GPUS[1], 0, ("gpu", 1)),
        ("GPU-c3", 0, ("gpu", 2)),
        ("GPU-8b,GPU-8a", 1, ("gpu", 0)),
        (MIGS[2][1], 0, ("mig", 2, 1)),
        ("MIG-1111", 0, ("mig", 2, 0)),
    ],
)
def test_torch_index_maps_to_the_right_nvml_device(
    raw: str | None, torch_index: int, handle: tuple[object, ...]
) -> None:
    assert _cuda_visible.nvml_handle(torch_index, raw, FakeNVML(GPUS, MIGS)) == handle


@pytest.mark.parametrize(
    ("raw", "torch_index", "message"),
    [
        ("-1", 0, "device_index 0 is not visible: CUDA_VISIBLE_DEVICES='-1' exposes 0"),
        ("", 0, "exposes 0 device"),
        ("1,-1,0", 1, "exposes 1 device"),
        ("GPU-8", 0, "'GPU-8' matches 2 devices; expected exactly one"),
        ("GPU-ffff", 0, "'GPU-ffff' matches no device"),
    ],
)
def test_unmappable_indices_name_the_variable(raw: str, torch_index: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _cuda_visible.nvml_handle(torch_index, raw, FakeNVML(GPUS, MIGS))


def test_available_memory_asks_nvml_for_the_visible_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda, "_nvml", lambda: FakeNVML(GPUS, MIGS))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-c3d4,GPU-8a1f")
    acc = CUDAAccelerator()
    assert acc.available_memory() == 3000
    assert acc.available_memory(1) == 1000
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-2222")
    assert acc.available_memory(0) == 3002


def test_available_memory_falls_back_to_torch_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda, "_nvml", lambda: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: (123 + index, 456))
    assert CUDAAccelerator().available_memory(1) == 124


@pytest.mark.parametrize(
    ("capability", "override", "expected"),
    [((8, 0), None, True), ((7, 0), None, True), ((6, 1), None, False), ((6, 1), "1", True),
     ((6, 0), "0", False), ((5, 2), "1", False)],
)  # fmt: skip
def test_fp16_gate(
    monkeypatch: pytest.MonkeyPatch,
    capability: tuple[int, int],
    override: str | None,
    expected: bool,
) -> None:
    if override is None:
        monkeypatch.delenv(cuda.ALLOW_DEPRECATED_FP16_ENV, raising=False)
    else:
        monkeypatch.setenv(cuda.ALLOW_DEPRECATED_FP16_ENV, override)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: capability)
    assert CUDAAccelerator().is_fp16_supported() is expected


def test_bad_fp16_override_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cuda.ALLOW_DEPRECATED_FP16_ENV, "yes")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (6, 1))
    with pytest.raises(ValueError, match="ACCEL_ALLOW_DEPRECATED_FP16 must be 0 or 1, got 'yes'"):
        CUDAAccelerator().is_fp16_supported()


def test_triton_needs_ampere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (7, 5))
    assert CUDAAccelerator().is_triton_supported() is False


def test_probe_never_starts_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden() -> None:
        raise AssertionError("the probe started the CUDA runtime")

    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "_lazy_init", forbidden)
    monkeypatch.setattr(torch.cuda, "init", forbidden)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert CUDAAccelerator.probe().available
    assert CUDAAccelerator.probe().reason == "2 device(s)"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert CUDAAccelerator.probe().reason == "no CUDA device is visible"


def test_probe_on_a_torch_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    assert not CUDAAccelerator.probe().available


def test_cuda_claims_streams_graphs_and_profiler_statically() -> None:
    for capability in (StreamAPI, GraphAPI, ProfilerAPI):
        assert issubclass(CUDAAccelerator, capability)
    acc = CUDAAccelerator()
    assert acc.is_synchronized_device() is False
    assert acc.visible_devices_envs() == ["CUDA_VISIBLE_DEVICES"]
    assert acc.communication_backend_name() == "nccl"
    assert acc.device_name(3) == "cuda:3"


@pytest.mark.parametrize(("major", "expected"), [(7, False), (8, True), (9, True)])
def test_bf16_counts_only_native_support(
    monkeypatch: pytest.MonkeyPatch, major: int, expected: bool
) -> None:
    import types

    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(major=major)
    )
    assert CUDAAccelerator().is_bf16_supported() is expected
