"""``accel::shm_all_reduce_``: the shared-memory sum as a ``torch.library`` custom op, so
that :func:`accel.comm.all_reduce_` can run inside a ``torch.compile`` graph."""

from __future__ import annotations

import atexit
from typing import Any

import torch

from accel.comm import _segment


@torch.library.custom_op("accel::shm_all_reduce_", mutates_args=("tensor",))
def shm_all_reduce_(tensor: torch.Tensor, group_key: int, timeout: float) -> None:
    """Sum ``tensor`` through the segment of the group ``group_key`` names."""
    shm = _segment.by_key(group_key)
    shm.finish_queued()  # a compiled graph calls this op without passing through shm_group
    _segment.reduce(shm, tensor, timeout)


@shm_all_reduce_.register_fake  # pyright: ignore[reportUnknownMemberType]
def _(tensor: torch.Tensor, group_key: int, timeout: float) -> None:
    return None


@atexit.register
def _unregister() -> None:
    # Left registered, the op's Python kernel is released by torch's dispatcher during the
    # interpreter's final teardown, which can abort a multi-rank job at exit
    # (docs/deepspeed.md, "Exit-time aborts").
    library: Any = getattr(shm_all_reduce_, "_lib", None)
    if library is not None:
        library._destroy()
