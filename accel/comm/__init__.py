"""Collectives that are faster than torch.distributed's where the hardware allows.

``all_reduce_(tensor)`` sums a CPU tensor across a process group. When every rank of the
group runs on this node and every rank's tensor is a float32, bfloat16 or float16 CPU
tensor, it goes through shared memory (``accel.ops._shm_comm``); otherwise it is
``dist.all_reduce`` on every rank. It is a ``torch.library`` custom op
(``accel::shm_all_reduce_``), so it works under ``torch.compile``.

The shared segment is set up on the group's first call, whatever the tensor (one gloo
round trip), and unmapped when the group is destroyed (:mod:`accel.comm._segment`). Each
call then decides the path for all ranks at once: a rank whose tensor cannot use shared
memory says so in the segment, and all ranks fall back together, so ranks never wait in
different collectives.

The package: the public collectives here; the segment and its registry in ``_segment``;
the custom op in ``_op``; torch.distributed's calls, typed, in ``_torch_dist`` and made
safe at exit in ``_release``; the ``"accel"`` torch.distributed backend in
:mod:`accel.comm.process_group` (also importable as ``accel.process_group``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.distributed as dist

from accel.comm import _op
from accel.comm import _torch_dist as tdist
from accel.comm._release import run_released
from accel.comm._segment import (
    SLOT_BYTES,
    reduce,
    shm_group,
    shm_timeout,
    spanning_of,
    summable_codes,
    wire_code,
)
from accel.comm._spanning import Spanning

__all__ = [
    "DEFAULT_TIMEOUT",
    "SLOT_BYTES",
    "all_gather_into_tensor_",
    "all_reduce_",
    "barrier",
    "broadcast_",
    "reduce_scatter_tensor_",
    "uses_shared_memory",
]

DEFAULT_TIMEOUT = None
"""A collective's default ``timeout``: the process group's own (``init_process_group``'s or
``new_group``'s ``timeout``; torch's default, 30 minutes, when none was given)."""


def uses_shared_memory(group: dist.ProcessGroup | None = None) -> bool:
    """Whether ``all_reduce_`` on ``group`` goes through shared memory (sets it up if needed).

    Collective: every rank of the group must call it the first time.
    """
    return shm_group(group, "uses_shared_memory") is not None


def _check_call(call: str, timeout: object, **tensors: object) -> None:
    """The checks every collective makes: tensors, timeout, an initialised process group."""
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
    ):
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    if not dist.is_initialized():
        raise RuntimeError(f"{call}() needs torch.distributed.init_process_group() first")


def all_reduce_(
    tensor: torch.Tensor,
    group: dist.ProcessGroup | None = None,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> torch.Tensor:
    """Sum ``tensor`` across ``group`` in place and return it.

    Shared memory when the whole group is on this node and every rank's tensor is a
    float32, bfloat16 or float16 CPU tensor; ``torch.distributed.all_reduce`` on every
    rank otherwise (ranks may pass tensors that differ in this: they agree on the path
    through the segment). A peer that exits raises at once, and one that stays silent for
    ``timeout`` seconds (default: the group's own timeout) raises ``RuntimeError`` naming
    it; the group's shared-memory path is then unusable. As with torch.distributed, every
    rank calls collectives on a group in the same order, one thread at a time.
    """
    # The common call (a tensor, the group's timeout) is screened with one test; anything
    # else gets the full checks, which name what is wrong (an int timeout passes them).
    if not isinstance(tensor, torch.Tensor) or timeout is not None:  # pyright: ignore[reportUnnecessaryIsInstance]
        _check_call("all_reduce_", timeout, tensor=tensor)
    # On every rank, whatever its tensor: the setup is collective.
    shm = shm_group(group, "all_reduce_")
    if shm is None:
        spanning = spanning_of(group)
        if spanning is not None and not torch.compiler.is_compiling():
            _named_ranks(
                spanning, "all_reduce", _two_level_all_reduce, tensor,
                shm_timeout(group, timeout),
            )  # fmt: skip
        else:
            run_released(tdist.all_reduce, [tensor], group, tensor)
    elif torch.compiler.is_compiling():
        # Inside a compiled graph the call must be an op torch.compile can see.
        _op.shm_all_reduce_(tensor, shm.key, shm.seconds(timeout))
    else:  # eager: skip the op dispatcher, which costs more than a small all-reduce
        reduce(shm, tensor, shm.seconds(timeout))
    return tensor


def _movable(*tensors: torch.Tensor) -> bool:
    """Whether this rank's tensors can be copied through the segment as raw bytes."""
    return all(t.is_cpu and t.is_contiguous() for t in tensors)


def _check_world_multiple(
    whole_name: str, whole: torch.Tensor, part_name: str, part: torch.Tensor, world: int
) -> None:
    """``whole`` must hold ``world`` x ``part``'s elements, of ``part``'s dtype."""
    if whole.dtype != part.dtype or whole.numel() != part.numel() * world:
        raise ValueError(
            f"{whole_name} must hold world size ({world}) x {part_name}'s {part.numel()} "
            f"elements of {part.dtype}, got {whole.numel()} of {whole.dtype}"
        )


def all_gather_into_tensor_(
    output: torch.Tensor,
    tensor: torch.Tensor,
    group: dist.ProcessGroup | None = None,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> torch.Tensor:
    """Gather every rank's ``tensor`` into ``output`` (rank order, concatenated on the
    first dimension), as ``dist.all_gather_into_tensor``; returns ``output``.

    Through shared memory when the group is on this node and every rank's tensors are
    contiguous CPU tensors (any dtype: bytes are copied, bit for bit); through
    torch.distributed on every rank otherwise. Ranks that pass different sizes or dtypes
    all get an error.
    """
    _check_call("all_gather_into_tensor_", timeout, output=output, tensor=tensor)
    _check_world_multiple("output", output, "tensor", tensor, dist.get_world_size(group))
    shm = shm_group(group, "all_gather_into_tensor_")  # collective setup on every rank
    eligible = _movable(output, tensor)
    done = shm is not None and shm.communicator.all_gather(
        data=tensor.data_ptr() if eligible else 0, out=output.data_ptr() if eligible else 0,
        nbytes=tensor.numel() * tensor.element_size(), dtype=wire_code(tensor.dtype),
        eligible=eligible, timeout=shm.seconds(timeout),
    )  # fmt: skip
    if not done:
        run_released(tdist.all_gather_single, [output, tensor], group, output, tensor)
    return output


def reduce_scatter_tensor_(
    output: torch.Tensor,
    input: torch.Tensor,  # torch.distributed's name for it
    group: dist.ProcessGroup | None = None,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> torch.Tensor:
    """Sum ``input`` (world size x ``output``'s elements, rank order) across ``group`` and
    keep this rank's block in ``output``, as ``dist.reduce_scatter_tensor`` with ``SUM``;
    returns ``output``.

    Through shared memory, summed in rank order in fp32 (identical to :func:`all_reduce_`'s
    bits), when the group is on this node and every rank's tensors are contiguous float32,
    bfloat16 or float16 CPU tensors (``output`` may be this rank's block of ``input``);
    torch.distributed on every rank otherwise (gloo has no float16 reduce_scatter). Ranks
    that pass different sizes or dtypes all get an error.
    """
    _check_call("reduce_scatter_tensor_", timeout, output=output, input=input)
    _check_world_multiple("input", input, "output", output, dist.get_world_size(group))
    shm = shm_group(group, "reduce_scatter_tensor_")  # collective setup on every rank
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
    return output


def _own_block_or_apart(output: torch.Tensor, input: torch.Tensor, rank: int) -> bool:
    """Whether ``output`` is exactly this rank's block of ``input`` or shares no bytes with
    it (with any other overlap, bytes could be overwritten before they are read)."""
    out_start, in_start = output.data_ptr(), input.data_ptr()
    out_end = out_start + output.numel() * output.element_size()
    in_end = in_start + input.numel() * input.element_size()
    own = in_start + rank * output.numel() * output.element_size()
    return out_start == own or out_end <= in_start or in_end <= out_start


def broadcast_(
    tensor: torch.Tensor,
    src: int,
    group: dist.ProcessGroup | None = None,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> torch.Tensor:
    """Copy ``tensor`` from global rank ``src`` to every rank of ``group``, in place, as
    ``dist.broadcast``; returns ``tensor``. Shared memory under the same conditions as
    :func:`all_gather_into_tensor_`."""
    _check_call("broadcast_", timeout, tensor=tensor)
    if not isinstance(src, int) or isinstance(src, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"src must be a global rank (int), got {src!r}")
    root = dist.get_group_rank(group, src) if group is not None else src
    if not 0 <= root < dist.get_world_size(group):
        raise ValueError(f"src {src} is not a rank of the group")
    shm = shm_group(group, "broadcast_")
    spanning = spanning_of(group) if shm is None else None
    if spanning is not None and not torch.compiler.is_compiling():
        _named_ranks(spanning, "broadcast", _two_level_broadcast, tensor, src, timeout)
        return tensor
    eligible = _movable(tensor)
    done = shm is not None and shm.communicator.broadcast(
        data=tensor.data_ptr() if eligible else 0, nbytes=tensor.numel() * tensor.element_size(),
        dtype=wire_code(tensor.dtype), root=root, eligible=eligible, timeout=shm.seconds(timeout),
    )  # fmt: skip
    if not done:
        run_released(tdist.broadcast, [tensor], group, tensor, src=src)
    return tensor


def barrier(
    group: dist.ProcessGroup | None = None, *, timeout: float | None = DEFAULT_TIMEOUT
) -> None:
    """Return once every rank of ``group`` has called it (shared memory when the group is
    on this node, ``dist.barrier`` otherwise)."""
    _check_call("barrier", timeout)
    shm = shm_group(group, "barrier")
    if shm is None:
        tdist.barrier(group=group)
    else:
        shm.communicator.barrier(timeout=shm.seconds(timeout))


def _named_ranks(
    spanning: Spanning, name: str, collective: Callable[..., None], *args: object
) -> None:
    """Run a two-level collective; a peer's death or timeout raises ``RuntimeError`` with
    the global ranks behind the node-local ranks the error names."""
    try:
        collective(spanning, *args)
    except RuntimeError as error:
        raise RuntimeError(
            f"{error} [two-level {name}: node-local ranks 0..{spanning.local_size - 1} "
            f"are global ranks {list(spanning.node)}]"
        ) from error


def _two_level_broadcast(
    spanning: Spanning, tensor: torch.Tensor, src: int, timeout: float | None
) -> None:
    """``src``'s tensor to a group that spans nodes: over gloo to one rank per node (the
    ranks at ``src``'s position, or the leaders), then inside each node's shared memory."""
    local = spanning.local
    source_node = spanning.where.node_of(src)
    if spanning.even:
        position = source_node.index(src)
        if spanning.node[position] == dist.get_rank():  # one of the ranks at that position
            assert spanning.across is not None  # every rank has one, when even
            run_released(tdist.broadcast, [tensor], spanning.across, tensor, src=src)
        broadcast_(tensor, spanning.node[position], group=local, timeout=timeout)
        return
    if source_node == spanning.node:  # the whole node (its leader too) takes it from src
        broadcast_(tensor, src, group=local, timeout=timeout)
    if spanning.across is not None:  # the leaders pass it from src's node's leader
        run_released(tdist.broadcast, [tensor], spanning.across, tensor, src=source_node[0])
    if source_node != spanning.node:
        broadcast_(tensor, spanning.node[0], group=local, timeout=timeout)


def _two_level_all_reduce(spanning: Spanning, tensor: torch.Tensor, timeout: float) -> None:
    """Sum ``tensor`` over a group that spans nodes, in place (accel.comm._spanning says
    how); every rank ends bit-identical."""
    local, size = spanning.local, spanning.local_size
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    if not spanning.even:
        all_reduce_(flat, group=local, timeout=timeout)
        if spanning.across is not None:  # this rank is its node's leader
            run_released(tdist.all_reduce, [flat], spanning.across, flat)
        broadcast_(flat, spanning.node[0], group=local, timeout=timeout)
    else:
        share = math.ceil(flat.numel() / size)
        padded = flat
        if share * size != flat.numel():
            padded = flat.new_zeros(share * size)
            padded[: flat.numel()] = flat
        mine = flat.new_empty(share)
        reduce_scatter_tensor_(mine, padded, group=local, timeout=timeout)
        assert spanning.across is not None  # every rank has a share to send, when even
        run_released(tdist.all_reduce, [mine], spanning.across, mine)
        all_gather_into_tensor_(padded, mine, group=local, timeout=timeout)
        if padded is not flat:
            flat.copy_(padded[: flat.numel()])
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))
