"""DeepSpeed's pinned-memory contract on the adapter: ``pin_memory``, ``is_pinned`` and
``unpin_memory`` with its torch backend (``DS_PIN_MEMORY_BACKEND`` unset) and its native one
(``native``, served by accel.io.locked), and host-memory registration with the device runtime.
In process, without installing into DeepSpeed: the native manager is pointed at accel's
``PinMemoryBuilder`` so nothing is compiled."""

from __future__ import annotations

from typing import Any

import pytest
import torch

deepspeed = pytest.importorskip("deepspeed")

import deepspeed.ops.op_builder as ds_op_builder  # noqa: E402  # pyright: ignore[reportMissingTypeStubs]
import deepspeed.utils.pin_memory as ds_pin_memory  # noqa: E402  # pyright: ignore[reportMissingTypeStubs]
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from accel.backends.cpu import CPUAccelerator  # noqa: E402
from accel.backends.cuda import CUDAAccelerator  # noqa: E402
from accel.integrations.deepspeed import op_builders  # noqa: E402
from accel.integrations.deepspeed.adapter import AccelDeepSpeedAccelerator  # noqa: E402
from accel.io import locked  # noqa: E402


@pytest.fixture
def cpu(monkeypatch: pytest.MonkeyPatch) -> AccelDeepSpeedAccelerator:
    monkeypatch.delenv("DS_PIN_MEMORY_BACKEND", raising=False)
    return AccelDeepSpeedAccelerator(CPUAccelerator())


@pytest.fixture
def native(
    monkeypatch: pytest.MonkeyPatch, cpu: AccelDeepSpeedAccelerator
) -> AccelDeepSpeedAccelerator:
    """The CPU adapter with DeepSpeed's native backend on, its manager fresh and over accel."""
    monkeypatch.setenv("DS_PIN_MEMORY_BACKEND", "native")
    monkeypatch.setattr(ds_op_builder, "PinMemoryBuilder", op_builders.PinMemoryBuilder)
    monkeypatch.setattr(ds_pin_memory, "_shared_native_pins", None)
    # The manager asks DeepSpeed's get_accelerator() whether to register buffers with a
    # device runtime: let it find the adapter, as it does once the integration is on.
    monkeypatch.setattr("deepspeed.accelerator.get_accelerator", lambda: cpu)
    return cpu


def test_torch_backend_is_pinned_is_torchs_answer(cpu: AccelDeepSpeedAccelerator) -> None:
    tensor = torch.randn(4, 8)
    pinned = cpu.pin_memory(tensor)
    assert cpu.is_pinned(pinned) == pinned.is_pinned()
    assert cpu.is_pinned(pinned) is False  # the CPU has no torch pinning
    assert cpu.unpin_memory(pinned) is None
    with pytest.raises(TypeError, match=r"tensor must be a torch\.Tensor, got list"):
        cpu.is_pinned([1, 2])


def test_torch_backend_does_not_count_locked_buffers(cpu: AccelDeepSpeedAccelerator) -> None:
    # Only the native backend tracks accel.io.locked's buffers; the torch backend asks torch.
    buffer = locked.new_locked_tensor(64, torch.float32)
    try:
        assert cpu.is_pinned(buffer) is buffer.is_pinned()
    finally:
        locked.free_locked(buffer.data_ptr())


def test_native_backend_pins_copies_and_unpins_with_views(
    native: AccelDeepSpeedAccelerator,
) -> None:
    tensor = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    pinned = native.pin_memory(tensor)
    assert tuple(pinned.shape) == (4, 8)
    assert torch.equal(pinned, tensor)
    assert getattr(pinned, "ds_pinned", False) is True
    assert locked.is_locked(pinned)  # accel's registry holds it
    view = pinned.reshape(-1).narrow(0, 8, 8)
    assert native.is_pinned(view)
    assert native.is_pinned(pinned[1])

    assert native.unpin_memory(pinned) is True
    assert native.is_pinned(pinned) is False
    assert native.is_pinned(view) is False
    assert native.is_pinned(pinned[1]) is False
    assert native.unpin_memory(pinned) is False  # freed once


def test_native_backend_flags_and_empty_buffers(native: AccelDeepSpeedAccelerator) -> None:
    tensor = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    alloc = native.pin_memory(tensor, make_copy=False)
    assert tuple(alloc.shape) == (4, 8)
    assert native.is_pinned(alloc)
    flat = native.pin_memory(tensor, match_shape=False)
    assert tuple(flat.shape) == (32,)
    assert torch.equal(flat, tensor.reshape(-1))
    empty = native.pin_empty(2, 3, dtype=torch.bfloat16)
    like = native.pin_empty_like(tensor)
    assert (tuple(empty.shape), empty.dtype) == ((2, 3), torch.bfloat16)
    assert tuple(like.shape) == (4, 8)
    for buffer in (alloc, flat, empty, like):
        assert native.is_pinned(buffer)
        assert native.unpin_memory(buffer) is True
        assert native.is_pinned(buffer) is False


def test_native_backend_ordinary_tensors_are_not_pinned(
    native: AccelDeepSpeedAccelerator,
) -> None:
    assert native.is_pinned(torch.zeros(1024)) is False


def _storageless() -> list[torch.Tensor]:
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.zeros(2, 8))
    return [fake, torch.zeros(2, 8, device="meta")]


@pytest.mark.parametrize("backend", ["torch", "native"])
def test_storageless_tensors_are_never_pinned(request: pytest.FixtureRequest, backend: str) -> None:
    acc: AccelDeepSpeedAccelerator = request.getfixturevalue(
        "cpu" if backend == "torch" else "native"
    )
    for tensor in _storageless():
        assert acc.is_pinned(tensor) is False


class _Cudart:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def cudaHostRegister(self, address: int, num_bytes: int, flags: int) -> int:
        self.calls.append(("register", address, num_bytes, flags))
        return 0

    def cudaHostUnregister(self, address: int) -> int:
        self.calls.append(("unregister", address))
        return 0


def test_host_memory_registration_goes_to_the_device_runtime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Without a GPU: DeepSpeed's CUDA backend calls cudart, which is recorded here.
    cudart = _Cudart()
    monkeypatch.setattr(torch.cuda, "cudart", lambda: cudart)
    checked: list[int] = []
    monkeypatch.setattr(torch.cuda, "check_error", checked.append)
    cuda = AccelDeepSpeedAccelerator(CUDAAccelerator())
    assert cuda.register_host_memory(8192, 4096) is True
    cuda.unregister_host_memory(8192)
    assert cudart.calls == [("register", 8192, 4096, 0), ("unregister", 8192)]
    assert checked == [0, 0]
    assert cuda.pin_memory_alignment() == 1
    cpu = AccelDeepSpeedAccelerator(CPUAccelerator())  # DeepSpeed's CPU backend declines
    assert cpu.register_host_memory(8192, 4096) is False
    cpu.unregister_host_memory(8192)  # nothing registered, nothing to undo
    assert cpu.pin_memory_alignment() == 1


def test_alignment_is_the_device_runtimes(cpu: AccelDeepSpeedAccelerator) -> None:
    from deepspeed.accelerator.npu_accelerator import (  # pyright: ignore[reportMissingTypeStubs]
        NPU_Accelerator,
    )

    # NPU_Accelerator() needs torch_npu; its alignment is a constant of the class.
    cpu.native_accelerator = NPU_Accelerator.__new__(NPU_Accelerator)
    assert cpu.pin_memory_alignment() == 4096


@pytest.mark.parametrize(
    ("address", "num_bytes", "error", "message"),
    [
        ("8192", 4096, TypeError, "address must be a positive int, got str '8192'"),
        (0, 4096, ValueError, "address must be a positive int, got 0"),
        (8192, -1, ValueError, "num_bytes must be a positive int, got -1"),
        (8192, 1.5, TypeError, "num_bytes must be a positive int, got float 1.5"),
    ],
)
def test_registration_names_bad_arguments(
    cpu: AccelDeepSpeedAccelerator, address: Any, num_bytes: Any, error: type, message: str
) -> None:
    with pytest.raises(error, match=message.replace(".", r"\.")):
        cpu.register_host_memory(address, num_bytes)
