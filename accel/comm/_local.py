"""The collectives of a group on one node: through its shared segment when every rank can,
through torch.distributed on every rank otherwise (decided by all ranks together, in the
segment).

No argument checks here: :mod:`accel.comm`'s public functions make them, then call these
for a node-local group (its segment from ``shm_group``, its members a
:class:`~accel.comm._link.TorchGroup`); :mod:`accel.comm._two_level` calls them for the
node level of a group that spans nodes (the node's :class:`~accel.comm._link.Link` and
its segment). Every tensor here is contiguous: the public functions see to that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from accel.comm._segment import reduce, summable_codes, wire_code

if TYPE_CHECKING:
    from accel.comm._link import Members
    from accel.comm._segment import ShmGroup


def all_reduce(
    tensor: torch.Tensor, shm: ShmGroup | None, members: Members, timeout: float | None
) -> None:
    """Sum ``tensor`` across the members in place."""
    if shm is None:
        members.all_reduce(tensor, timeout=timeout)
    else:
        reduce(shm, tensor, shm.seconds(timeout))


def all_gather_into_tensor(
    output: torch.Tensor,
    tensor: torch.Tensor,
    shm: ShmGroup | None,
    members: Members,
    timeout: float | None,
) -> None:
    """Every member's ``tensor`` into ``output``, in member order (``tensor`` may be this
    member's block of ``output`` when there is a segment: each block is written with the
    bytes it already holds)."""
    eligible = tensor.is_cpu and output.is_cpu
    done = shm is not None and shm.communicator.all_gather(
        data=tensor.data_ptr() if eligible else 0, out=output.data_ptr() if eligible else 0,
        nbytes=tensor.numel() * tensor.element_size(), dtype=wire_code(tensor.dtype),
        eligible=eligible, timeout=shm.seconds(timeout),
    )  # fmt: skip
    if not done:
        members.all_gather_single(output, tensor, timeout=timeout)


def reduce_scatter_tensor(
    output: torch.Tensor,
    input: torch.Tensor,  # torch.distributed's name for it
    shm: ShmGroup | None,
    members: Members,
    timeout: float | None,
) -> None:
    """Sum ``input`` across the members; this member's block into ``output``."""
    eligible = (
        input.is_cpu
        and output.is_cpu
        and input.dtype in summable_codes()
        and _own_block_or_apart(output, input, members.rank())
    )
    done = shm is not None and shm.communicator.reduce_scatter(
        data=input.data_ptr() if eligible else 0, out=output.data_ptr() if eligible else 0,
        numel=output.numel(), dtype=wire_code(input.dtype), eligible=eligible,
        timeout=shm.seconds(timeout),
    )  # fmt: skip
    if not done:
        members.reduce_scatter_single(output, input, timeout=timeout)


def _own_block_or_apart(output: torch.Tensor, input: torch.Tensor, rank: int) -> bool:
    """Whether ``output`` is exactly this rank's block of ``input`` or shares no bytes with
    it (with any other overlap, bytes could be overwritten before they are read)."""
    out_start, in_start = output.data_ptr(), input.data_ptr()
    out_end = out_start + output.numel() * output.element_size()
    in_end = in_start + input.numel() * input.element_size()
    own = in_start + rank * output.numel() * output.element_size()
    return out_start == own or out_end <= in_start or in_end <= out_start


def broadcast(
    tensor: torch.Tensor, root: int, shm: ShmGroup | None, members: Members, timeout: float | None
) -> None:
    """Member ``root``'s ``tensor`` to every member, in place."""
    eligible = tensor.is_cpu
    done = shm is not None and shm.communicator.broadcast(
        data=tensor.data_ptr() if eligible else 0, nbytes=tensor.numel() * tensor.element_size(),
        dtype=wire_code(tensor.dtype), root=root, eligible=eligible, timeout=shm.seconds(timeout),
    )  # fmt: skip
    if not done:
        members.broadcast(tensor, root, timeout=timeout)
