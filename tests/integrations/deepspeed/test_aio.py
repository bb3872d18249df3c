"""DeepSpeed's ``aio_handle`` on accel.io (aio.py), in this process."""

from __future__ import annotations

import importlib
import os
import pathlib
from typing import Any

import pytest
import torch

deepspeed = pytest.importorskip("deepspeed")


from accel.integrations.deepspeed import op_builders  # noqa: E402


def test_aio_handle_has_deepspeeds_methods_and_counts(tmp_path: pathlib.Path) -> None:
    from accel.integrations.deepspeed.aio import aio_handle

    handle = op_builders.AsyncIOBuilder().load().aio_handle(1 << 16, 4, False, True, 2)
    assert isinstance(handle, aio_handle)
    assert (handle.get_block_size(), handle.get_queue_depth(), handle.get_single_submit(),
            handle.get_overlap_events(), handle.get_intra_op_parallelism(),
            handle.get_alignment()) == (1 << 16, 4, False, True, 2, 1024)  # fmt: skip
    buffers = [
        handle.new_cpu_locked_tensor(50_000 + i, torch.empty(0, dtype=torch.bfloat16))
        for i in range(3)
    ]
    assert all(b.data_ptr() % 4096 == 0 and b.dtype == torch.bfloat16 for b in buffers)
    for i, b in enumerate(buffers):
        b.copy_(torch.randn(b.numel()))
        assert handle.async_pwrite(b, str(tmp_path / f"{i}.swp")) == 0
    assert handle.wait() == 3  # DeepSpeed's swapper asserts this count
    assert handle.wait() == 0
    back = [torch.empty_like(b) for b in buffers]
    for i, b in enumerate(back):
        assert handle.async_pread(b, str(tmp_path / f"{i}.swp")) == 0
    assert handle.wait() == 3
    assert all(torch.equal(a, b) for a, b in zip(buffers, back, strict=True))
    assert handle.sync_pwrite(buffers[0], str(tmp_path / "s.swp")) == 1
    assert handle.pread(back[0], str(tmp_path / "s.swp"), True, False) == 1  # validated
    assert handle.write(buffers[1], str(tmp_path / "w.swp"), True) == 0
    assert handle.read(back[1], str(tmp_path / "w.swp"), True) == 0
    assert handle.free_cpu_locked_tensor(buffers[2]) is True
    with pytest.raises(FileNotFoundError, match="nowhere"):
        handle.sync_pwrite(buffers[0], str(tmp_path / "nowhere" / "x.swp"))


def test_a_failed_validated_write_leaves_nothing_for_the_next_wait(tmp_path: pathlib.Path) -> None:
    # The failed request's validation stayed queued, and the next wait() raised it again.
    handle = op_builders.AsyncIOBuilder().load().aio_handle(1 << 16, 4, False, True, 2)
    buffer = torch.ones(1024)
    handle.pwrite(buffer, "/dev/full", True, True)  # every write there fails: ENOSPC
    with pytest.raises(OSError, match="No space left on device"):
        handle.wait()
    handle.pwrite(buffer, str(tmp_path / "good.swp"), True, True)
    assert handle.wait() == 1


def test_aio_handle_takes_deepspeeds_small_blocks_offsets_and_descriptors(
    tmp_path: pathlib.Path,
) -> None:
    # What DeepSpeed's own aio unit tests do: 1 KiB blocks, writes at 1 KiB offsets through
    # a descriptor opened with O_DIRECT, the overloads' keyword names, `async` as a keyword.
    handle = op_builders.AsyncIOBuilder().load().aio_handle(1024, 2, True, True, 2)
    assert handle.get_block_size() == 1024
    data = handle.new_cpu_locked_tensor(4 * 1024, torch.empty(0, dtype=torch.uint8))
    data.copy_(torch.randint(0, 256, (4 * 1024,), dtype=torch.uint8))
    path = tmp_path / "offsets.bin"
    try:
        fd = os.open(path, os.O_DIRECT | os.O_CREAT | os.O_WRONLY, 0o600)
    except OSError as error:
        pytest.skip(f"O_DIRECT is not supported under {tmp_path}: {error}")
    try:
        for start, length in ((0, 1024), (1024, 2048), (3072, 1024)):
            piece = torch.narrow(data, 0, start, length)
            assert handle.async_pwrite(buffer=piece, fd=fd, file_offset=start) == 0
            assert handle.wait() == 1
    finally:
        os.close(fd)
    assert path.read_bytes() == data.numpy().tobytes()
    back = torch.zeros_like(data)
    assert handle.async_pwrite(buffer=data, filename=str(tmp_path / "named.bin")) == 0
    assert handle.wait() == 1
    assert handle.pread(back, str(tmp_path / "named.bin"), True, **{"async": False}) == 1
    assert torch.equal(back, data)
    with pytest.raises(TypeError, match="exactly one"):
        handle.async_pwrite(data, str(path), 0, fd=3)
    with pytest.raises(TypeError, match=r"exactly one\), got filename=None, fd=None"):
        handle.async_pwrite(data)
    with pytest.raises(TypeError, match="missing its 'async' argument"):
        handle.pread(back, str(path), False)
    with pytest.raises(TypeError, match="got async twice"):
        handle.pwrite(back, str(path), False, True, **{"async": True})
    with pytest.raises(TypeError, match="unexpected keyword arguments: asynch"):
        handle.pread(back, str(path), False, asynch=True)
    assert handle.free_cpu_locked_tensor(data) is True
    assert handle.free_cpu_locked_tensor(back) is False  # not a locked buffer, as in DeepSpeed


def test_only_locked_buffers_count_as_pinned() -> None:
    # DeepSpeed's optimizer swapper writes a "pinned" state from its swap buffer, not from
    # the tensor: an ordinary tensor taken for pinned because its address happened to be
    # page-aligned made ZeRO-Infinity write empty swap files (about 1 run in 15).
    from accel.io import aligned_empty

    handle = op_builders.AsyncIOBuilder().load().aio_handle(1 << 16, 4, False, True, 1)
    other = op_builders.AsyncIOBuilder().load().aio_handle(1 << 16, 4, False, True, 1)
    ordinary = aligned_empty(8192, torch.float32)  # page-aligned, not locked
    assert ordinary.data_ptr() % 4096 == 0
    assert not handle.is_pinned(ordinary)
    locked = handle.new_cpu_locked_tensor(8192, torch.empty(0))
    assert handle.is_pinned(locked)
    assert handle.is_pinned(locked.narrow(0, 1000, 2000))  # a slice, as DeepSpeed narrows
    assert other.is_pinned(locked)  # page-locked whichever handle made it
    # DeepSpeed 0.19 keeps one manager per process (deepspeed_pin_tensor_t::shared()):
    # any handle frees any handle's buffer, once, and pin_memory's handle sees the same.
    pins = op_builders.PinMemoryBuilder().load().pin_handle()
    assert pins.is_pinned(locked)
    assert other.free_cpu_locked_tensor(locked)
    assert not handle.free_cpu_locked_tensor(locked)
    assert not handle.is_pinned(locked)
    assert not pins.is_pinned(locked)


def test_alignment_is_deepspeeds_so_its_io_buffers_take_its_sizes(tmp_path: pathlib.Path) -> None:
    # deepspeed.io's buffers (FastFileWriter's) assert sizes against get_alignment(): 512 bytes
    # per parallel slice, as DeepSpeed's handle answers. A 4096-byte buffer split in two for
    # double buffering is DeepSpeed's own test's size; at 4096 per slice it was refused.
    double_io_buffer: Any = importlib.import_module("deepspeed.io.double_io_buffer")
    handle = op_builders.AsyncIOBuilder().load().aio_handle(1024, 2, False, False, 1)
    assert handle.get_alignment() == 512
    two = op_builders.AsyncIOBuilder().load().aio_handle(1024, 2, False, False, 2)
    assert two.get_alignment() == 1024
    pinned = handle.new_cpu_locked_tensor(4096, torch.empty(0, dtype=torch.uint8))
    buffers: Any = double_io_buffer.Double_IO_Buffer(pinned, handle)
    data = torch.randint(0, 256, (5 * 1024,), dtype=torch.uint8)
    path = tmp_path / "out.bin"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY)
    try:
        written = filled = 0
        while filled < data.numel():
            filled += int(buffers.fill(data, filled))
            if buffers.is_full() or filled == data.numel():
                count = int(buffers.get_aligned_num_bytes())
                buffers.drain(count, fd, written)
                written += count
        buffers.complete_ongoing_drain()
    finally:
        os.close(fd)
    handle.free_cpu_locked_tensor(pinned)
    assert written == data.numel()
    assert path.read_bytes() == data.numpy().tobytes()


def test_validating_through_a_descriptor_leaves_it_open(tmp_path: pathlib.Path) -> None:
    # validate=True opened the "file name" with open(), which closes a descriptor it is
    # given: the caller's descriptor was closed, its number free for the next open().
    handle = op_builders.AsyncIOBuilder().load().aio_handle(1 << 16, 4, False, True, 1)
    path = tmp_path / "v.swp"
    path.write_bytes(bytes(4096))
    fd = os.open(path, os.O_RDWR)
    try:
        data = torch.arange(1024, dtype=torch.int32)
        assert handle.pwrite(data, fd, True, False) == 1
        back = torch.empty_like(data)
        assert handle.pread(back, fd, True, False) == 1
        assert torch.equal(back, data)
        os.fstat(fd)  # still open
    finally:
        os.close(fd)


def test_what_is_no_tensor_is_named_where_a_buffer_goes() -> None:
    # Each was an AttributeError ("'NoneType' object has no attribute 'dtype'").
    from accel.io import locked

    handle = op_builders.AsyncIOBuilder().load().aio_handle(1 << 16, 4, False, True, 1)
    calls: list[tuple[Any, str]] = [
        (lambda: handle.new_cpu_locked_tensor(4, None), "example_tensor must be a torch.Tensor"),
        (lambda: handle.free_cpu_locked_tensor(123), "tensor must be a torch.Tensor, got int"),
        (lambda: handle.is_pinned("x"), "buffer must be a torch.Tensor, got str"),
        (lambda: locked.is_locked(None), "tensor must be a torch.Tensor, got NoneType"),
    ]
    for call, message in calls:
        with pytest.raises(TypeError, match=message):
            call()
