"""Collectives that are faster than torch.distributed's where the hardware allows.

``all_reduce_(tensor)`` sums a CPU tensor across a process group. When every rank of the
group runs on this node and every rank's tensor is a float32, bfloat16 or float16 CPU
tensor, it goes through shared memory (``accel.ops._shm_comm``); otherwise it is
``dist.all_reduce`` on every rank. It is a ``torch.library`` custom op
(``accel::shm_all_reduce_``), so it works under ``torch.compile``.

The shared segment is set up on the group's first call, whatever the tensor (one gloo
round trip): rank 0 creates an anonymous segment (``memfd_create``), the peers open it
through rank 0's ``/proc/<pid>/fd/<fd>``, then rank 0 closes that descriptor. The segment
never has a name in /dev/shm, so nothing can be left there however a job ends, and no
other job can open it; it is unmapped when the group is destroyed (torch drops the group
object). Each call then decides the path for all ranks at once: a rank
whose tensor cannot use shared memory says so in the segment, and all ranks fall back
together, so ranks never wait in different collectives.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import secrets
import socket
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist

from accel._dist_release import run_released
from accel.ops._dtypes import dtype_codes

if TYPE_CHECKING:
    from accel.process_group import AccelProcessGroup

# Per rank and buffer; messages larger than this go in chunks, with two rank barriers per
# chunk. 16 MiB: on this 2-vCPU VM, 64 MiB took 22-24 ms in 4 MiB chunks and 11-14 ms in
# 16 MiB ones when the host is busy (8 MiB: ~15 ms), and no less when it is quiet. The
# segment (2 buffers x world x this) is memfd memory, allocated only where touched.
SLOT_BYTES = 16 << 20
DEFAULT_TIMEOUT = 10.0  # seconds a rank waits for a live but silent peer


def _collective(*names: str) -> Any:
    """The first of ``names`` that torch.distributed has: torch 2.10+ renamed collectives
    (``all_gather_single``) and deprecated the old names, which accel's floor, 2.4, has."""
    for name in names:
        found: Any = getattr(dist, name, None)
        if found is not None:
            return found
    raise AttributeError(f"torch.distributed has none of {names}")


_all_gather_single = _collective("all_gather_single", "all_gather_into_tensor")
_reduce_scatter_single = _collective("reduce_scatter_single", "reduce_scatter_tensor")


@dataclass
class _ShmGroup:
    communicator: Any  # accel.ops._shm_comm.Communicator
    key: int  # names the group to the compiled op (accel::shm_all_reduce_)
    # A weak reference: the segment lives as long as its process group, not longer (None:
    # the caller passed no group, which means whatever group is the default one).
    group_ref: weakref.ref[dist.ProcessGroup] | None
    codes: dict[torch.dtype, int]  # the dtypes the segment sums, and their codes
    # An "accel" process group, whose queued reductions run on its worker thread: a call
    # made straight to accel.comm with it waits for them (one order on the segment).
    owner: weakref.ref[AccelProcessGroup] | None = None

    def finish_queued(self) -> None:
        """Wait for the owning "accel" group's queued reductions, if any."""
        owner = self.owner() if self.owner is not None else None
        if owner is not None:
            owner.wait_queued()

    @property
    def group(self) -> dist.ProcessGroup | None:
        """The group, as the caller named it (None: the default group)."""
        return self.group_ref() if self.group_ref is not None else None


_lock = threading.Lock()
# Keyed by id() of the process group; an entry leaves when its group is garbage (see
# _remember), so a destroyed group's segment is unmapped instead of kept for the process's
# lifetime. None: the group is not node-local.
_groups: dict[int, _ShmGroup | None] = {}
_by_key: dict[int, _ShmGroup] = {}
_keys = itertools.count(1)


@functools.cache
def _shm_dtype_codes() -> dict[torch.dtype, int]:
    """The dtypes the shared-memory path sums; none when the extension is not built."""
    try:
        from accel.ops import _shm_comm
    except ImportError:
        return {}
    return dtype_codes(_shm_comm)


@functools.cache
def _wire_code(dtype: torch.dtype) -> int:
    """A dtype's code in the segment's announcements (summable or not)."""
    from accel.ops import _shm_comm

    name = str(dtype).removeprefix("torch.")
    return _shm_dtype_codes().get(dtype, _shm_comm.OTHER_DTYPES.get(name, _shm_comm.UNKNOWN_DTYPE))


def _node_identity() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            boot_id = boot.read().strip()
    except OSError:
        boot_id = ""
    return f"{socket.gethostname()}/{boot_id}"


def _as_bytes(tensor: torch.Tensor) -> bytes:
    values = cast("list[int]", tensor.tolist())  # pyright: ignore[reportUnknownMemberType]
    return bytes(values)


def _gather_text(text: str, world: int, group: dist.ProcessGroup | None) -> list[str]:
    # Plain tensor collectives: the *_object ones need numpy, which accel does not.
    data = text.encode()
    if len(data) > 256:
        raise ValueError(f"identity too long to exchange: {text!r}")
    mine = torch.zeros(256, dtype=torch.uint8)
    mine[: len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    run_released(dist.all_gather, [mine, *gathered], group, gathered, mine)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    return [_as_bytes(t).rstrip(b"\0").decode() for t in gathered]


def _open(
    path: str, create: bool, rank: int, world: int, session: int, pids: list[int]
) -> tuple[Any, str]:
    try:
        from accel.ops import _shm_comm

        communicator = _shm_comm.Communicator(
            path=path, create=create, rank=rank, world=world, slot_bytes=SLOT_BYTES,
            session=session, pids=pids,
        )  # fmt: skip
        return communicator, ""
    except (ImportError, RuntimeError, OSError) as failure:
        return None, f"{type(failure).__name__}: {failure}"


def _as_accel_group(process_group: dist.ProcessGroup) -> AccelProcessGroup | None:
    """``process_group`` if it is an "accel" one, else None."""
    from accel.process_group import AccelProcessGroup  # imports this module: not at the top

    return process_group if isinstance(process_group, AccelProcessGroup) else None


def _cpu_capable(group: dist.ProcessGroup | None) -> bool:
    """Whether ``group`` runs collectives on CPU tensors (not so for a pure NCCL group)."""
    process_group = group if group is not None else dist.group.WORLD
    assert process_group is not None  # initialised: all_reduce_ checked
    if _as_accel_group(process_group) is not None:  # gloo underneath
        return True
    try:
        process_group._get_backend(torch.device("cpu"))  # pyright: ignore[reportPrivateUsage]
    except (RuntimeError, AttributeError):
        return False
    return True


def _setup(group: dist.ProcessGroup | None) -> _ShmGroup | None:
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if world == 1 or not _cpu_capable(group):
        return None  # nothing to exchange, or no CPU collectives to exchange it with
    identities = _gather_text(f"{_node_identity()} {os.getpid()}", world, group)
    if any(
        identity.rsplit(" ", 1)[0] != identities[0].rsplit(" ", 1)[0] for identity in identities
    ):
        return None  # ranks on several nodes: shared memory cannot reach them all
    pids = [int(identity.rsplit(" ", 1)[1]) for identity in identities]
    offer = torch.zeros(2, dtype=torch.int64)  # rank 0's descriptor, the session id
    communicator: Any = None
    error = ""
    if rank == 0:
        # Create before announcing: the broadcast is what lets peers attach.
        session = secrets.randbits(63)
        communicator, error = _open("", True, rank, world, session, pids)
        if communicator is not None:
            offer[0] = int(communicator.path().rsplit("/", 1)[1])
            offer[1] = session
        else:
            offer[0] = -1  # tells the peers not to attach
    source = dist.get_global_rank(group, 0) if group is not None else 0
    run_released(dist.broadcast, [offer], group, offer, src=source)
    if rank != 0 and int(offer[0]) >= 0:
        path = f"/proc/{pids[0]}/fd/{int(offer[0])}"
        communicator, error = _open(path, False, rank, world, int(offer[1]), pids)
    elif rank != 0:
        error = "rank 0 could not create the segment"
    # Everyone must agree: one rank without the segment means all fall back.
    attached = torch.tensor([0 if error else 1], dtype=torch.int32)
    run_released(dist.all_reduce, [attached], group, attached, op=dist.ReduceOp.MIN)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    if rank == 0 and communicator is not None:
        communicator.release()  # every rank has mapped it (or given up): no one else may open it
    if int(attached) == 0:
        if error:
            warnings.warn(
                f"accel.comm: shared memory unavailable ({error}); using torch.distributed",
                stacklevel=3,
            )
        return None
    return _ShmGroup(
        communicator, key=next(_keys), group_ref=weakref.ref(group) if group is not None else None,
        codes=_shm_dtype_codes(),
    )  # fmt: skip


def _shm_group(group: dist.ProcessGroup | None, call: str) -> _ShmGroup | None:
    """The group's segment (None: the group is not node-local); the first call on a group
    sets it up, collectively. ``call`` names the caller in the error for no process group."""
    # One dict lookup once the group is known (an uninitialised default group is None,
    # whose id is never a key, so the check below still runs).
    process_group = group if group is not None else dist.group.WORLD
    try:
        known = _groups[id(process_group)]
    except KeyError:
        pass
    else:
        # (While torch.compile traces, the op waits instead, when the graph runs.)
        if known is not None and known.owner is not None and not torch.compiler.is_compiling():
            known.finish_queued()
        return known
    if process_group is None or not dist.is_initialized():
        raise RuntimeError(f"{call}() needs torch.distributed.init_process_group() first")
    accel_group = _as_accel_group(process_group)
    if accel_group is not None and not accel_group.in_own_collective():
        # Called straight, not by the group: the group sets the segment up (it comes back
        # here from inside), so that the setup's own collectives go to its gloo; set up
        # from here, they would come back through the group and wait on _lock.
        accel_group.uses_shared_memory()
        return _groups[id(process_group)]
    with _lock:
        if id(process_group) not in _groups:
            shm = _setup(group)
            _remember(process_group, shm)
        return _groups[id(process_group)]


def _remember(process_group: dist.ProcessGroup, shm: _ShmGroup | None) -> None:
    """Keep ``shm`` for ``process_group`` until the group is garbage."""
    ident = id(process_group)
    _groups[ident] = shm
    if shm is not None:
        _by_key[shm.key] = shm
        accel_group = _as_accel_group(process_group)
        if accel_group is not None:
            shm.owner = weakref.ref(accel_group)
    # Runs when the group object dies (torch drops it in destroy_process_group), before
    # its id can be reused; the Communicator unmaps the segment when the last reference
    # to it goes (a collective still running holds one).
    forget = weakref.finalize(process_group, _forget, ident, shm.key if shm else None)
    forget.atexit = False  # at exit the mappings go with the process


def _forget(ident: int, key: int | None) -> None:
    _groups.pop(ident, None)
    if key is not None:
        _by_key.pop(key, None)


def uses_shared_memory(group: dist.ProcessGroup | None = None) -> bool:
    """Whether ``all_reduce_`` on ``group`` goes through shared memory (sets it up if needed).

    Collective: every rank of the group must call it the first time.
    """
    return _shm_group(group, "uses_shared_memory") is not None


def _reduce(shm: _ShmGroup, tensor: torch.Tensor, timeout: float) -> None:
    """Sum through the segment if every rank can, else ``dist.all_reduce`` on every rank."""
    code = shm.codes.get(tensor.dtype)
    eligible = code is not None and tensor.is_cpu  # is_cpu: 5x faster than device.type
    work = tensor if not eligible or tensor.is_contiguous() else tensor.contiguous()
    # Positional: pybind11 matches keywords by name, ~0.4 us of a 4 KiB call's ~6.
    done = shm.communicator.all_reduce(
        work.data_ptr() if eligible else 0, work.numel(),
        code if code is not None else _wire_code(tensor.dtype), eligible, timeout,
    )  # fmt: skip
    if not done:  # some rank's tensor cannot use the segment: all ranks fall back
        run_released(dist.all_reduce, [tensor], shm.group, tensor)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    elif work is not tensor:
        tensor.copy_(work)


@torch.library.custom_op("accel::shm_all_reduce_", mutates_args=("tensor",))
def _shm_all_reduce_op(tensor: torch.Tensor, group_key: int, timeout: float) -> None:
    shm = _by_key[group_key]
    shm.finish_queued()  # a compiled graph calls this op without passing through _shm_group
    _reduce(shm, tensor, timeout)


@_shm_all_reduce_op.register_fake  # pyright: ignore[reportUnknownMemberType]
def _(tensor: torch.Tensor, group_key: int, timeout: float) -> None:
    return None


@atexit.register
def _unregister_op() -> None:
    # Left registered, the op's Python kernel is released by torch's dispatcher during the
    # interpreter's final teardown. Importing accel.comm into a 2-rank native DeepSpeed job
    # made its exit abort ("terminate called without an active exception") in 7 of 8 runs;
    # with this, 3 of 8. The rest was gloo's worker dropping tensors during teardown,
    # fixed by accel._dist_release (docs/deepspeed.md).
    library: Any = getattr(_shm_all_reduce_op, "_lib", None)
    if library is not None:
        library._destroy()


def _check_call(call: str, timeout: object, **tensors: object) -> None:
    """The checks every collective makes: tensors, timeout, an initialised process group."""
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    if not dist.is_initialized():
        raise RuntimeError(f"{call}() needs torch.distributed.init_process_group() first")


def all_reduce_(
    tensor: torch.Tensor,
    group: dist.ProcessGroup | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> torch.Tensor:
    """Sum ``tensor`` across ``group`` in place and return it.

    Shared memory when the whole group is on this node and every rank's tensor is a
    float32, bfloat16 or float16 CPU tensor; ``torch.distributed.all_reduce`` on every
    rank otherwise (ranks may pass tensors that differ in this: they agree on the path
    through the segment). A peer that exits raises at once, and one that stays silent for
    ``timeout`` seconds raises ``RuntimeError`` naming it; the group's shared-memory path
    is then unusable. As with torch.distributed, every rank calls collectives on a group
    in the same order, one thread at a time.
    """
    # The common call (a tensor, a float timeout) is screened in ~0.1 us; anything else
    # gets the full checks, which name what is wrong (an int timeout passes them).
    if not isinstance(tensor, torch.Tensor) or type(timeout) is not float or not timeout > 0:  # pyright: ignore[reportUnnecessaryIsInstance]
        _check_call("all_reduce_", timeout, tensor=tensor)
    # On every rank, whatever its tensor: the setup is collective.
    shm = _shm_group(group, "all_reduce_")
    if shm is None:
        run_released(dist.all_reduce, [tensor], group, tensor)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    elif torch.compiler.is_compiling():
        # Inside a compiled graph the call must be an op torch.compile can see.
        torch.ops.accel.shm_all_reduce_(tensor, shm.key, float(timeout))
    else:  # eager: skip the op dispatcher (~12 us, more than a small all-reduce costs)
        _reduce(shm, tensor, float(timeout))
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
    timeout: float = DEFAULT_TIMEOUT,
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
    shm = _shm_group(group, "all_gather_into_tensor_")  # collective setup on every rank
    eligible = _movable(output, tensor)
    done = shm is not None and shm.communicator.all_gather(
        data=tensor.data_ptr() if eligible else 0, out=output.data_ptr() if eligible else 0,
        nbytes=tensor.numel() * tensor.element_size(), dtype=_wire_code(tensor.dtype),
        eligible=eligible, timeout=float(timeout),
    )  # fmt: skip
    if not done:
        run_released(_all_gather_single, [output, tensor], group, output, tensor)
    return output


def reduce_scatter_tensor_(
    output: torch.Tensor,
    input: torch.Tensor,  # torch.distributed's name for it
    group: dist.ProcessGroup | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
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
    shm = _shm_group(group, "reduce_scatter_tensor_")  # collective setup on every rank
    eligible = (
        _movable(output, input)
        and input.dtype in _shm_dtype_codes()
        and _own_block_or_apart(output, input, dist.get_rank(group))
    )
    done = shm is not None and shm.communicator.reduce_scatter(
        data=input.data_ptr() if eligible else 0, out=output.data_ptr() if eligible else 0,
        numel=output.numel(), dtype=_wire_code(input.dtype), eligible=eligible,
        timeout=float(timeout),
    )  # fmt: skip
    if not done:
        run_released(_reduce_scatter_single, [output, input], group, output, input)
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
    timeout: float = DEFAULT_TIMEOUT,
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
    shm = _shm_group(group, "broadcast_")
    eligible = _movable(tensor)
    done = shm is not None and shm.communicator.broadcast(
        data=tensor.data_ptr() if eligible else 0, nbytes=tensor.numel() * tensor.element_size(),
        dtype=_wire_code(tensor.dtype), root=root, eligible=eligible, timeout=float(timeout),
    )  # fmt: skip
    if not done:
        run_released(dist.broadcast, [tensor], group, tensor, src=src)
    return tensor


def barrier(group: dist.ProcessGroup | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Return once every rank of ``group`` has called it (shared memory when the group is
    on this node, ``dist.barrier`` otherwise)."""
    _check_call("barrier", timeout)
    shm = _shm_group(group, "barrier")
    if shm is None:
        dist.barrier(group=group)  # pyright: ignore[reportUnknownMemberType]
    else:
        shm.communicator.barrier(timeout=float(timeout))
