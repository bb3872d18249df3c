"""accel.io.locked: page-locked host buffers, one registry per process."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.io import locked


def _vm_locked_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    raise AssertionError("no VmLck in /proc/self/status")


@settings(max_examples=30, deadline=None)
@given(
    num_elem=st.integers(0, 50_000),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.uint8, torch.int64]),
)
def test_buffers_are_page_aligned_and_slices_of_them_count(
    num_elem: int, dtype: torch.dtype
) -> None:
    before = locked.locked_bytes()
    tensor = locked.new_locked_tensor(num_elem, dtype)
    try:
        assert (tensor.shape, tensor.dtype, tensor.is_cpu) == ((num_elem,), dtype, True)
        assert tensor.data_ptr() % locked.PAGE_SIZE == 0
        assert locked.is_locked(tensor)
        if num_elem > 2:
            assert locked.is_locked(tensor[1:-1])
        assert locked.locked_bytes() == before + num_elem * tensor.element_size()
    finally:
        assert locked.free_locked(tensor.data_ptr())
    assert locked.locked_bytes() == before
    assert not locked.free_locked(tensor.data_ptr())  # once


def test_ordinary_and_overhanging_tensors_do_not_count() -> None:
    tensor = locked.new_locked_tensor(1024, torch.float32)
    try:
        assert not locked.is_locked(torch.empty(1024))
        storage, offset = tensor.untyped_storage(), tensor.storage_offset()
        assert locked.is_locked(torch.empty(0).set_(storage, offset + 1000, (24,), (1,)))
        # Same storage, starting inside the buffer and running past its end.
        assert not locked.is_locked(torch.empty(0).set_(storage, offset + 1000, (100,), (1,)))
        assert not locked.is_locked(torch.empty(4, device="meta"))
    finally:
        locked.free_locked(tensor.data_ptr())


def test_memory_is_mlocked_until_freed() -> None:
    before = _vm_locked_kib()
    tensor = locked.new_locked_tensor(1 << 16, torch.float32)  # 256 KiB
    locked_now = _vm_locked_kib() - before
    locked.free_locked(tensor.data_ptr())
    if locked_now == 0:
        pytest.skip("mlock refused here (RLIMIT_MEMLOCK without CAP_IPC_LOCK); logged instead")
    assert locked_now == 256
    assert _vm_locked_kib() == before


def test_the_callers_tensor_can_go_while_the_memory_stays() -> None:
    # DeepSpeed frees a buffer from a finalizer on the tensor it was given: that tensor
    # must not be kept alive by the registry, and views of it must keep it alive.
    tensor = locked.new_locked_tensor(256, torch.float32)
    start = tensor.data_ptr()
    tensor.copy_(torch.arange(256.0))
    collected = weakref.finalize(tensor, lambda: None)
    view = tensor.narrow(0, 8, 8)
    del tensor
    gc.collect()
    assert collected.alive  # the view holds it
    del view
    gc.collect()
    assert not collected.alive
    assert locked.is_locked(torch.empty(0).set_(torch.empty(0).untyped_storage())) is False
    assert locked.free_locked(start)  # the registry still had it


def test_bad_sizes_are_errors() -> None:
    with pytest.raises(ValueError, match="num_elem must be an int >= 0, got -1"):
        locked.new_locked_tensor(-1, torch.float32)
    with pytest.raises(ValueError, match=r"num_elem must be an int >= 0, got 2\.0"):
        locked.new_locked_tensor(2.0, torch.float32)  # type: ignore[arg-type]


def test_deepspeeds_pin_handle_frees_by_address_and_refuses_other_addresses() -> None:
    pytest.importorskip("deepspeed")
    from accel.integrations.deepspeed.pin_memory import pin_handle

    handle = pin_handle()
    tensor = handle.new_cpu_locked_tensor(100, torch.empty(0, dtype=torch.float16))
    assert (tensor.dtype, tensor.numel()) == (torch.float16, 100)
    assert handle.is_pinned(tensor[10:20])
    assert not handle.is_pinned(torch.empty(4, device="meta"))
    with pytest.raises(TypeError, match="address must be an int, got str"):
        handle.free_cpu_locked_tensor_by_ptr("0x1000")  # type: ignore[arg-type]
    assert handle.free_cpu_locked_tensor_by_ptr(tensor.data_ptr()) is True
    assert handle.free_cpu_locked_tensor_by_ptr(tensor.data_ptr()) is False
