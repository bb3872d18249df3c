"""CUDA on a real GPU: `pytest -m gpu`. Skipped (by conftest) where no GPU is present.

The per-protocol conformance suites also run on CUDA whenever it is available; these tests
cover what only a GPU can show.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import accel
from accel.backends.cuda import CUDAAccelerator, _nvml

pytestmark = pytest.mark.gpu


def _python(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
        env=os.environ | env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_probe_creates_no_cuda_context() -> None:
    out = _python(
        "import torch; from accel.backends.cuda import CUDAAccelerator as C;"
        "print(C.probe().available, torch.cuda.is_initialized())"
    )
    assert out == "True False"


def test_auto_detection_picks_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCEL_BACKEND", raising=False)
    accel.reset_accelerator()
    try:
        assert isinstance(accel.get_accelerator(), CUDAAccelerator)
    finally:
        accel.reset_accelerator()


def test_nvml_free_memory_agrees_with_the_driver() -> None:
    acc = CUDAAccelerator()
    free, _total = torch.cuda.mem_get_info(0)
    assert abs(acc.available_memory(0) - free) < 512 << 20
    assert acc.total_memory(0) == torch.cuda.get_device_properties(0).total_memory


def test_uuid_forms_of_cuda_visible_devices_reach_the_same_gpu() -> None:
    nvml = _nvml()
    if nvml is None:
        pytest.skip("NVML is not available")
    uuid = str(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(0)))
    code = (
        "from accel.backends.cuda import CUDAAccelerator as C; print(C().available_memory(0) > 0)"
    )
    for form in (uuid, uuid[:12], f" {uuid} "):
        assert _python(code, CUDA_VISIBLE_DEVICES=form) == "True"


def test_dtype_answers_on_this_gpu() -> None:
    acc = CUDAAccelerator()
    major, _minor = torch.cuda.get_device_capability()
    assert acc.is_fp16_supported() is (major >= 7)
    assert acc.is_bf16_supported() is (major >= 8)


def test_nvtx_ranges_and_pinned_memory() -> None:
    acc = CUDAAccelerator()
    acc.range_push("accel-gpu-test")
    acc.range_pop()
    pinned = acc.pin_memory(torch.ones(16))
    assert acc.is_pinned(pinned)
    assert torch.equal(pinned.to("cuda", non_blocking=True).cpu(), torch.ones(16))


def test_graph_objects_have_torch_accelerator_graphs_shape() -> None:
    acc = CUDAAccelerator()
    x = torch.zeros(1024, device="cuda")
    side = acc.Stream()
    acc.set_stream(side)  # capture needs a stream other than the legacy default one
    try:
        first = acc.Graph()
        assert isinstance(first, torch.cuda.CUDAGraph)  # create_graph's callers take it too
        with first:
            x += 1
        second = acc.Graph(keep_graph=True, pool=first.pool(), capture_error_mode="relaxed")
        second.capture_begin()
        x *= 2
        second.capture_end()
        second.instantiate()
    finally:
        acc.set_stream(acc.default_stream())
    x.zero_()
    first.replay()
    second.replay()
    acc.replay_graph(first)
    acc.synchronize()
    assert torch.equal(x, torch.full_like(x, 3.0))
    with pytest.raises(ValueError, match="capture_error_mode must be one of"):
        acc.Graph(capture_error_mode="loose")  # type: ignore[arg-type]


def test_torch_accelerator_names_on_cuda() -> None:
    acc = CUDAAccelerator()
    free, total = accel.get_memory_info(0, acc)
    assert 0 < free <= total == acc.total_memory(0)
    assert accel.get_device_capability(0, acc) == torch.accelerator.get_device_capability(0)
    torch.ones(1 << 20).pin_memory()
    accel.empty_host_cache(acc)
    with pytest.raises(ValueError, match="must be a cuda stream"):
        acc.set_stream(torch.Stream("cpu"))
