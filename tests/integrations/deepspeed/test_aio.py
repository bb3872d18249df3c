"""DeepSpeed's ``aio_handle`` on accel.io (aio.py), in this process."""

from __future__ import annotations

import pathlib

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
            handle.get_alignment()) == (1 << 16, 4, False, True, 2, 8192)  # fmt: skip
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
