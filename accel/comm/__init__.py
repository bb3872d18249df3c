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

A group whose ranks sit on several nodes (``ACCEL_NODE_ID`` can simulate nodes on one
host) runs all-reduce, all-gather, reduce-scatter and broadcast over two levels: shared
memory inside each node, gloo between nodes (``_spanning`` places the ranks and makes the
gloo sub-groups, ``_two_level`` runs the collectives).

Failures are every rank's: a peer that exits, stays silent for the timeout, or leaves a
collective after an error of its own ends the step on every rank, and a rank that comes
late to a step another rank gave up on raises too, touching nothing (each step is settled
at a shared gate that either every rank passes or none does). Once a rank has been told a
step failed, no peer reads or writes its tensors for that step, so the caller may reuse
them at once. The group's segment is then unusable: later calls raise, naming the first
failure. Errors every rank makes alike before any byte moves (a bad argument) leave the
group usable. Setting a group up is collective per group: groups may be used first in any
order, from any thread, and under torch.compile. A rank outside a group gets torch's
warning and a call that does nothing, as with torch.distributed's own collectives.

Conventions of every function here: ``group`` is the process group, ``None`` for the
default (world) group; a collective's ``timeout`` is the seconds to wait for a silent peer,
``None`` (:data:`DEFAULT_TIMEOUT`) for the group's own timeout (where a collective runs on
torch.distributed itself, in a group on one node without a segment or with a tensor the
segment does not take, or one rank per node, the group's own timeout applies:
torch.distributed takes none per call). Every collective raises
``TypeError`` for a tensor argument that is not a ``torch.Tensor``, ``ValueError`` for a
``timeout`` that is not a number of seconds > 0, and ``RuntimeError`` when no process group
is initialised, or when a peer exited or stayed silent for ``timeout`` seconds (the
group's shared-memory path is then unusable); each function's ``Raises`` lists only what
it adds. A collective returns the tensor it writes (``tensor`` in place, else ``output``).
Its own tensors' sizes or dtypes that do not fit one another are a ``ValueError`` on the
rank that passed them (its peers then time out); in shared memory, ranks that pass
different sizes or dtypes all get a ``ValueError``.

The package: the public collectives here (argument checks, then the way ``_route``
chooses: ``_local`` for a group on one node, ``_two_level`` for one on several); the
segment and its registry in ``_segment``;
the custom op in ``_op``; torch.distributed's calls, typed, in ``_torch_dist`` and made
safe at exit in ``_release``; the ``"accel"`` torch.distributed backend in
:mod:`accel.comm.process_group` (also importable as ``accel.process_group``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import cast

import torch
import torch.distributed as dist

from accel.comm import _local, _op, _two_level
from accel.comm import _torch_dist as tdist
from accel.comm._link import TorchGroup
from accel.comm._release import run_released
from accel.comm._route import route
from accel.comm._segment import (
    POOL_ENV,
    SLOT_BYTES,
    ShmGroup,
    contiguous_work,
    pooled_empty,
    reduce,
    refuse_shared_elements,
    shm_group,
    shm_timeout,
    spanning_of,
    write_back,
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
    "shared_empty",
    "try_shared_empty",
    "uses_shared_memory",
]

DEFAULT_TIMEOUT = None
"""A collective's default ``timeout``: the process group's own (``init_process_group``'s or
``new_group``'s ``timeout``; torch's default, 30 minutes, when none was given)."""


def uses_shared_memory(group: dist.ProcessGroup | None = None) -> bool:
    """Whether ``all_reduce_`` on ``group`` goes through shared memory (sets it up if needed).

    Collective: every rank of the group must call it the first time.

    Returns:
        ``True`` when every rank of the group is on this node and the segment is set up.

    Raises:
        RuntimeError: No process group is initialised.
    """
    return shm_group(group, "uses_shared_memory") is not None


def shared_empty(
    size: int | Sequence[int],
    *,
    dtype: torch.dtype = torch.float32,
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """An uninitialised CPU tensor in ``group``'s shared segment, where collectives move
    each byte once.

    When every rank's tensor of an all-reduce (``all_reduce_``, or the ``"accel"``
    backend's ``all_reduce``) was made here, each rank sums its share straight from the
    other ranks' tensors into all of them: each byte is read and written once per rank,
    instead of being copied into the segment and back out. All-gather and reduce-scatter
    do the same when every rank's input was made here, and broadcast when the root's
    tensor was (:mod:`accel.comm.fsdp` gives FSDP2 such buffers). When only some ranks'
    tensors were, every rank takes the copying path (the same bits either way). For a
    group across nodes the tensor is in its node's segment: the steps inside each node
    of an all-reduce (its reduce-scatter and all-gather) and of a broadcast then go
    straight between the node's tensors. In every other
    respect the tensor is a CPU tensor like any other, with one exception: its memory is a
    shared mapping, so a process forked after it was made shares it (the child's writes
    show in the parent's tensor and back, where an ordinary tensor's pages would be copied
    on write); its memory goes back to the group's pool when it is garbage.

    Each rank's pool is ``ACCEL_SHM_POOL_BYTES`` of address space (default 1 GiB, 0 turns
    pools off), memory only where tensors have been; pages a tensor touched stay with the
    pool for the next one until the group is destroyed.

    Collective the first time on a group: it sets the group's segment up, as
    ``uses_shared_memory`` does.

    Args:
        size: The shape: an int or a sequence of ints >= 0.
        dtype: The element type (any; float32, bfloat16 and float16 are the ones the
            segment sums).

    Returns:
        A contiguous tensor of ``size`` and ``dtype``: in the segment when the group has one
        (every rank on this node, or, across nodes, every rank of this node) and this
        rank's pool has room; from ``torch.empty`` otherwise (one rank per node, no pool,
        an empty tensor, or, with a warning, a full pool).

    Raises:
        TypeError: ``size`` is not an int or a sequence of ints, or ``dtype`` is not a
            ``torch.dtype``.
        ValueError: A dimension is negative, or the tensor would hold more than 2**63 - 1
            bytes; or ``ACCEL_SHM_POOL_BYTES`` is not a number of bytes >= 0 and a multiple
            of 4096, or too large for the group's segment, on this rank or another.
        RuntimeError: No process group is initialised.
    """
    tensor, shm = _pooled("shared_empty", size, dtype, group)
    if tensor is not None:
        return tensor
    shape = _shape(size)  # checked by _pooled
    if shm is not None:
        warnings.warn(
            f"accel.comm.shared_empty: the group's shared pool has no room for {shape} "
            f"{dtype} ({shm.communicator.pool_free_bytes} of {shm.communicator.pool_bytes} "
            f"bytes free; {POOL_ENV} sets its size); this tensor is an ordinary one",
            stacklevel=2,
        )
    return torch.empty(shape, dtype=dtype)


def try_shared_empty(
    size: int | Sequence[int],
    *,
    dtype: torch.dtype = torch.float32,
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor | None:
    """:func:`shared_empty`'s tensor when it is in the pool; else ``None``, with no warning.

    For a caller with its own way to make the tensor (a framework placing a buffer it would
    otherwise allocate): ``None`` wherever :func:`shared_empty` would return an ordinary
    tensor (no segment, pools off, an empty tensor, or a pool without room). Collective the
    first time on a group, as :func:`shared_empty`.

    Args:
        size: The shape: an int or a sequence of ints >= 0.
        dtype: The element type.

    Raises:
        TypeError: As :func:`shared_empty`.
        ValueError: As :func:`shared_empty`.
        RuntimeError: No process group is initialised.
    """
    return _pooled("try_shared_empty", size, dtype, group)[0]


def _pooled(
    call: str, size: int | Sequence[int], dtype: torch.dtype, group: dist.ProcessGroup | None
) -> tuple[torch.Tensor | None, ShmGroup | None]:
    """A tensor in this rank's pool of ``group``'s segment (None where it cannot be), and
    the segment when it has a pool the tensor did not fit in (None otherwise)."""
    shape = _shape(size)
    _check_dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > _MAX_TENSOR_BYTES:
        raise ValueError(
            f"size {size!r} of {dtype} needs {nbytes} bytes: more than a tensor can hold "
            f"({_MAX_TENSOR_BYTES})"
        )
    _check_call(call, None)
    shm = shm_group(group, call)
    if shm is None:  # a group across nodes: its node level's segment, if it has one
        spanning = spanning_of(group)
        shm = None if spanning is None else spanning.local_shm
    if shm is None or shm.communicator.pool_bytes == 0 or nbytes == 0:
        return None, None
    tensor = pooled_empty(shm, shape, dtype) if nbytes <= shm.communicator.pool_bytes else None
    return tensor, (shm if tensor is None else None)


_MAX_TENSOR_BYTES = 2**63 - 1  # torch counts bytes in int64


def _shape(size: object) -> tuple[int, ...]:
    """``shared_empty``'s ``size`` as a shape, checked (callers may pass anything)."""
    dims: object = (size,) if isinstance(size, int) else size
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise TypeError(f"size must be an int or a sequence of ints, got {size!r}")
    shape: list[int] = []
    for dim in cast("Sequence[object]", dims):
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise TypeError(f"size must be an int or a sequence of ints, got {size!r}")
        if dim < 0:
            raise ValueError(f"size must not have a negative dimension, got {size!r}")
        shape.append(dim)
    return tuple(shape)


def _check_dtype(dtype: object) -> None:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")


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
    float32, bfloat16 or float16 CPU tensor; over two levels (shared memory inside each
    node, gloo between nodes; every rank ends with the same bits) when the group spans
    nodes; ``torch.distributed.all_reduce`` on every rank otherwise (ranks may pass
    tensors that differ in this: they agree on the path through the segment). As with
    torch.distributed, every rank calls collectives on a group in the same order, one
    thread at a time.

    Args:
        tensor: This rank's summand; it receives the sum.
    """
    # The common call (a tensor, the group's timeout) is screened with one test; anything
    # else gets the full checks, which name what is wrong (an int timeout passes them).
    if not isinstance(tensor, torch.Tensor) or timeout is not None:  # pyright: ignore[reportUnnecessaryIsInstance]
        _check_call("all_reduce_", timeout, tensor=tensor)
    way = route(group, "all_reduce_")  # on every rank, whatever its tensor
    if isinstance(way, ShmGroup):
        if torch.compiler.is_compiling():
            # Inside a compiled graph the call must be an op torch.compile can see.
            _op.shm_all_reduce_(tensor, way.key, way.seconds(timeout))
        else:  # eager: skip the op dispatcher, which costs more than a small all-reduce
            reduce(way, tensor, way.seconds(timeout))
    elif way is not None:
        _two_level.named_ranks(
            way, "all_reduce", _two_level.all_reduce, tensor, shm_timeout(group, timeout)
        )
    elif not tdist.outside(group, "all_reduce_"):  # a non-member does nothing
        work = contiguous_work(tensor)  # no segment: gloo, which takes memory as it lies
        run_released(tdist.all_reduce, [work], group, work)
        if work is not tensor:
            write_back(tensor, work)
    return tensor


def _dense(tensor: torch.Tensor, argument: str) -> torch.Tensor:
    """``tensor`` if contiguous, else an uninitialised contiguous tensor of its shape to
    work in (``empty_like`` would keep a dense tensor's strides, so bytes written through
    a flat view of it would land out of order); ``ValueError``, named ``argument``, before
    anything moves for a tensor whose elements share memory (the result could not be
    written back)."""
    if tensor.is_contiguous():
        return tensor
    refuse_shared_elements(tensor, argument)
    return torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)


def _into_output(
    call: str,
    output: torch.Tensor,
    source: tuple[str, torch.Tensor],
    group: dist.ProcessGroup | None,
    timeout: float | None,
    two_level: Callable[..., None],
    local: Callable[..., None],
    *,
    gather: bool,
) -> torch.Tensor:
    """Check and run a gather (``output`` holds world size x ``source``) or a scatter (the
    other way) from ``source``, named as its caller names it, into ``output``: over two levels
    (placement even) or on one node, on contiguous tensors (copied back into a
    non-contiguous ``output``)."""
    source_name, tensor = source
    _check_call(call, timeout, output=output, **{source_name: tensor})
    if tdist.outside(group, call):
        return output
    world = dist.get_world_size(group)
    if gather:
        _check_world_multiple("output", output, source_name, tensor, world)
    else:
        _check_world_multiple(source_name, tensor, "output", output, world)
    way = route(group, call, uneven=False)  # collective setup on every rank
    dense = _dense(output, "output")
    tensor = tensor.contiguous()
    if gather and tensor.numel() and _two_level.shares_bytes(dense, tensor):
        # The input may be this rank's block of the output; anywhere else in it, the
        # gather would overwrite it before every part of it was sent.
        own = dense.data_ptr() + dist.get_rank(group) * tensor.nbytes
        if tensor.data_ptr() != own:
            tensor = tensor.clone()
    if isinstance(way, Spanning):
        _two_level.named_ranks(way, two_level.__name__, two_level, dense, tensor, timeout)
    else:
        local(dense, tensor, way, TorchGroup(group), timeout)
    if dense is not output:
        write_back(output, dense)
    return output


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
    """Gather every rank's ``tensor`` into ``output``, as ``dist.all_gather_into_tensor``.

    Through shared memory when the group is on this node and every rank's tensors are
    contiguous CPU tensors (any dtype: bytes are copied, bit for bit); over two levels
    (gloo between nodes, shared memory inside each) when the group spans nodes with the
    same number of ranks on each; through torch.distributed on every rank otherwise.

    Args:
        output: Receives the ranks' tensors in rank order, concatenated on the first
            dimension: world size x ``tensor``'s elements, of its dtype.
        tensor: This rank's part.
    """
    return _into_output(
        "all_gather_into_tensor_", output, ("tensor", tensor), group, timeout,
        _two_level.all_gather_into_tensor, _local.all_gather_into_tensor, gather=True,
    )  # fmt: skip


def reduce_scatter_tensor_(
    output: torch.Tensor,
    input: torch.Tensor,  # torch.distributed's name for it
    group: dist.ProcessGroup | None = None,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> torch.Tensor:
    """Sum ``input`` across ``group`` and keep this rank's block in ``output``.

    As ``dist.reduce_scatter_tensor`` with ``SUM``. Through shared memory, summed in rank
    order in fp32 (identical to :func:`all_reduce_`'s bits), when the group is on this node
    and every rank's tensors are contiguous float32, bfloat16 or float16 CPU tensors
    (``output`` may be this rank's block of ``input``); over two levels (shared memory
    inside each node, a ring between nodes) when the group spans nodes with the same number
    of ranks on each; torch.distributed on every rank otherwise.

    Args:
        output: Receives this rank's block of the sum.
        input: World size x ``output``'s elements, of its dtype, in rank order.
    """
    return _into_output(
        "reduce_scatter_tensor_", output, ("input", input), group, timeout,
        _two_level.reduce_scatter_tensor, _local.reduce_scatter_tensor, gather=False,
    )  # fmt: skip


def broadcast_(
    tensor: torch.Tensor,
    src: int,
    group: dist.ProcessGroup | None = None,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> torch.Tensor:
    """Copy ``tensor`` from global rank ``src`` to every rank of ``group``, in place.

    As ``dist.broadcast``. Shared memory and two levels under the same conditions as
    :func:`all_gather_into_tensor_` (two levels with uneven placement too, through one
    rank per node).

    Args:
        tensor: The source's data on ``src``; receives it everywhere else.
        src: The global rank to copy from.

    Raises:
        TypeError: ``src`` is not an ``int``.
        ValueError: ``src`` is not a rank of the group.
    """
    _check_call("broadcast_", timeout, tensor=tensor)
    if not isinstance(src, int) or isinstance(src, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"src must be a global rank (int), got {src!r}")
    if tdist.outside(group, "broadcast_"):
        return tensor
    world = dist.get_world_size(group)
    members = dist.get_process_group_ranks(group) if group is not None else list(range(world))
    if src not in members:
        raise ValueError(f"src {src} is not a rank of the group (its global ranks: {members})")
    root = dist.get_group_rank(group, src) if group is not None else src
    way = route(group, "broadcast_")  # collective setup on every rank
    dense = _dense(tensor, "tensor")
    if dense is not tensor:
        dense.copy_(tensor)
    if isinstance(way, Spanning):
        _two_level.named_ranks(way, "broadcast", _two_level.broadcast, dense, src, timeout)
    else:
        _local.broadcast(dense, root, way, TorchGroup(group), timeout)
    if dense is not tensor:
        write_back(tensor, dense)
    return tensor


def barrier(
    group: dist.ProcessGroup | None = None, *, timeout: float | None = DEFAULT_TIMEOUT
) -> None:
    """Return once every rank of ``group`` has called it.

    Shared memory when the group is on this node, ``dist.barrier`` otherwise.
    """
    _check_call("barrier", timeout)
    way = route(group, "barrier")
    if isinstance(way, ShmGroup):
        way.communicator.barrier(timeout=way.seconds(timeout))
    else:  # no barrier over two levels: torch's
        tdist.barrier(group=group)
