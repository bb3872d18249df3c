"""The collectives of a group on one node: through its shared segment when every rank can,
through torch.distributed on every rank otherwise (decided by all ranks together, in the
segment).

No argument checks here: :mod:`accel.comm`'s public functions make them, then call these
for a node-local group; :mod:`accel.comm._two_level` calls them for the node level of a
group that spans nodes.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from accel.comm import _torch_dist as tdist
from accel.comm._release import run_released
from accel.comm._segment import reduce, shm_group, summable_codes, wire_code


def all_reduce(tensor: torch.Tensor, group: dist.ProcessGroup, timeout: float | None) -> None:
    """Sum ``tensor`` across ``group`` in place."""
    shm = shm_group(group, "all_reduce_")
    if shm is None:
        run_released(tdist.all_reduce, [tensor], group, tensor)
    else:
        reduce(shm, tensor, shm.seconds(timeout))


def _movable(*tensors: torch.Tensor) -> bool:
    """Whether this rank's tensors can be copied through the segment as raw bytes."""
    return all(t.is_cpu and t.is_contiguous() for t in tensors)


def all_gather_into_tensor(
    output: torch.Tensor,
    tensor: torch.Tensor,
    group: dist.ProcessGroup | None,
    timeout: float | None,
) -> None:
    """Every rank's ``tensor`` into ``output``, in rank order (``tensor`` may be this
    rank's block of ``output`` when the group has a segment: each rank's block is
    written with the bytes it already holds)."""
    shm = shm_group(group, "all_gather_into_tensor_")
    eligible = _movable(output, tensor)
    done = shm is not None and shm.communicator.all_gather(
        data=tensor.data_ptr() if eligible else 0, out=output.data_ptr() if eligible else 0,
        nbytes=tensor.numel() * tensor.element_size(), dtype=wire_code(tensor.dtype),
        eligible=eligible, timeout=shm.seconds(timeout),
    )  # fmt: skip
    if not done:
        run_released(tdist.all_gather_single, [output, tensor], group, output, tensor)


def reduce_scatter_tensor(
    output: torch.Tensor,
    input: torch.Tensor,  # torch.distributed's name for it
    group: dist.ProcessGroup | None,
    timeout: float | None,
) -> None:
    """Sum ``input`` across ``group``; this rank's block into ``output``."""
    shm = shm_group(group, "reduce_scatter_tensor_")
    eligible = (
        _movable(output, input)
        and input.dtype in summable_codes()
        and _own_block_or_apart(output, input, dist.get_rank(group))
    )
    done = shm is not None and shm.communicator.reduce_scatter(
        data=input.data_ptr() if eligible else 0, out=output.data_ptr() if eligible else 0,
        numel=output.numel(), dtype=wire_code(input.dtype), eligible=eligible,
        timeout=shm.seconds(timeout),
    )  # fmt: skip
    if not done:
        run_released(tdist.reduce_scatter_single, [output, input], group, output, input)


def _own_block_or_apart(output: torch.Tensor, input: torch.Tensor, rank: int) -> bool:
    """Whether ``output`` is exactly this rank's block of ``input`` or shares no bytes with
    it (with any other overlap, bytes could be overwritten before they are read)."""
    out_start, in_start = output.data_ptr(), input.data_ptr()
    out_end = out_start + output.numel() * output.element_size()
    in_end = in_start + input.numel() * input.element_size()
    own = in_start + rank * output.numel() * output.element_size()
    return out_start == own or out_end <= in_start or in_end <= out_start


def broadcast(
    tensor: torch.Tensor, src: int, group: dist.ProcessGroup | None, timeout: float | None
) -> None:
    """Global rank ``src``'s ``tensor`` to every rank of ``group``, in place."""
    shm = shm_group(group, "broadcast_")
    root = dist.get_group_rank(group, src) if group is not None else src
    eligible = _movable(tensor)
    done = shm is not None and shm.communicator.broadcast(
        data=tensor.data_ptr() if eligible else 0, nbytes=tensor.numel() * tensor.element_size(),
        dtype=wire_code(tensor.dtype), root=root, eligible=eligible, timeout=shm.seconds(timeout),
    )  # fmt: skip
    if not done:
        run_released(tdist.broadcast, [tensor], group, tensor, src=src)


def uses_shared_memory(group: dist.ProcessGroup) -> bool:
    """Whether ``group`` has a segment (sets it up, collectively, on first use)."""
    return shm_group(group, "uses_shared_memory") is not None
