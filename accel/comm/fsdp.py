"""FSDP2 (``fully_shard``) with its communication buffers in the group's shared pools.

FSDP2 allocates a buffer for every all-gather (the unsharded parameters) and for every
reduce-scatter (the gradients), then hands it to the collective. With the hooks here, those
buffers come from :func:`accel.comm.shared_empty`, so the ``"accel"`` backend's
all-gather and reduce-scatter go straight between the ranks' buffers instead of copying
them through the segment::

    from accel.comm.fsdp import share_fsdp_buffers

    fully_shard(layer)  # for each layer, then the root
    fully_shard(model)
    share_fsdp_buffers(model)

The hooks call ``torch.distributed`` with the group FSDP2 passes, so the collectives take
whatever backend that group has: the pools pay only with the ``"accel"`` backend (or
``"cpu:accel"``). This module imports FSDP2's hook classes from
``torch.distributed.fsdp._fully_shard._fsdp_api``, where torch defines them (they are not
exported elsewhere).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn
from typing_extensions import override

try:
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_api import (  # pyright: ignore[reportPrivateUsage]
        AllGather,
        ReduceScatter,
    )
except ImportError as error:  # an older torch: FSDP2 without custom-communication hooks
    raise ImportError(
        "accel.comm.fsdp needs FSDP2's custom-communication hooks (FSDPModule."
        "set_custom_all_gather and the AllGather / ReduceScatter classes in torch.distributed."
        f"fsdp._fully_shard._fsdp_api); torch {torch.__version__} does not have them: {error}"
    ) from error

from accel.comm import _torch_dist as tdist
from accel.comm import shared_empty

__all__ = ["SharedAllGather", "SharedReduceScatter", "share_fsdp_buffers"]


class _SharedAlloc:
    """Buffers from the group's shared pool once the group is known.

    The group is the one given, or else the one FSDP2 passes to the first collective
    (buffers before that, and buffers for another device, are ordinary tensors).
    """

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self._group = group

    def _learn(self, group: dist.ProcessGroup) -> None:
        if self._group is None:
            self._group = group

    def allocate(
        self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        """A buffer of ``size`` and ``dtype`` on ``device``: in this rank's shared pool when
        ``device`` is the CPU and the group is known, as :func:`accel.comm.shared_empty`
        places it; from ``torch.empty`` otherwise.

        Args:
            size: The shape.
            dtype: The element type.
            device: Where FSDP2 wants the buffer.

        Returns:
            An uninitialised contiguous tensor.
        """
        shape = [int(s) for s in size]
        if self._group is None or torch.device(device).type != "cpu":
            return torch.empty(shape, dtype=dtype, device=device)
        return shared_empty(shape, dtype=dtype, group=self._group)


class SharedAllGather(_SharedAlloc, AllGather):
    """FSDP2's all-gather with its output buffer in the group's shared pool.

    Args:
        group: The group FSDP2 gathers over (``mesh.get_group()``); ``None`` to take the
            group of the first all-gather (its buffer is then an ordinary tensor).
    """

    @override
    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        async_op: bool = False,
    ) -> dist.Work | None:
        """``dist.all_gather_into_tensor`` on ``group``; FSDP2's input is this rank's block
        of the output, so both are in the pool."""
        self._learn(group)
        work: dist.Work | None = tdist.all_gather_single(
            output_tensor, input_tensor, group=group, async_op=async_op
        )  # fmt: skip
        return work


class SharedReduceScatter(_SharedAlloc, ReduceScatter):
    """FSDP2's reduce-scatter with its buffers in the group's shared pool.

    The sharded gradients FSDP2 keeps are views of the output buffers, so they stay in
    the pool until the gradients are freed, where the reduce dtype is the parameters' own
    (FSDP2 casts them into ordinary tensors otherwise); a process forked meanwhile shares
    them (a shared mapping, not a copy on write).

    Args:
        group: The group FSDP2 reduces over (``mesh.get_group()``); ``None`` to take the
            group of the first reduce-scatter (its buffers are then ordinary tensors).
    """

    @override
    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op: dist.ReduceOp | dist.ReduceOp.RedOpType,
        async_op: bool = False,
    ) -> dist.Work:
        """``dist.reduce_scatter_tensor`` on ``group`` with FSDP2's ``op``. Declared to
        return a ``Work``, as FSDP2's own default hook is, although torch returns ``None``
        without ``async_op``."""
        self._learn(group)
        work: dist.Work = tdist.reduce_scatter_single(
            output_tensor, input_tensor, op=op, group=group, async_op=async_op
        )  # fmt: skip
        return work


def share_fsdp_buffers(module: nn.Module, group: dist.ProcessGroup | None = None) -> int:
    """Give every FSDP2 module in ``module`` (itself included) the shared-pool hooks.

    Call it after ``fully_shard``, on the root module.

    Args:
        module: A module whose submodules (or itself) ``fully_shard`` has wrapped.
        group: The group FSDP2 shards over; ``None`` to take it from each module's first
            collective.

    Returns:
        How many FSDP2 modules got the hooks.

    Raises:
        TypeError: ``module`` is not an ``nn.Module``, or ``group`` not a process group or
            ``None``.
        ValueError: No module in ``module`` was wrapped by ``fully_shard``.
    """
    if not isinstance(module, nn.Module):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if group is not None and not isinstance(group, dist.ProcessGroup):  # pyright: ignore[reportUnnecessaryIsInstance]
        hint = " (a DeviceMesh: pass mesh.get_group())" if hasattr(group, "get_group") else ""
        raise TypeError(
            f"group must be a torch.distributed ProcessGroup or None, got "
            f"{type(group).__name__} {group!r:.60}{hint}"
        )
    wrapped = [m for m in module.modules() if isinstance(m, FSDPModule)]
    if not wrapped:
        raise ValueError(
            f"module ({type(module).__name__}) has no module wrapped by fully_shard: "
            "call share_fsdp_buffers after fully_shard"
        )
    for fsdp_module in wrapped:
        fsdp_module.set_custom_all_gather(SharedAllGather(group))
        fsdp_module.set_custom_reduce_scatter(SharedReduceScatter(group))
    return len(wrapped)
