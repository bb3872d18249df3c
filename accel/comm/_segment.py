"""A process group's shared segment: set up on first use, found by group, freed with it.

Rank 0 creates an anonymous segment (``memfd_create``), the peers open it through rank 0's
``/proc/<pid>/fd/<fd>``, then rank 0 closes that descriptor. The segment never has a name
in /dev/shm, so nothing can be left there however a job ends, and no other job can open
it; it is unmapped when torch drops the group object.

This layer knows nothing of accel's process group. A group class whose own collectives run
on the segment (``accel.comm.process_group.AccelProcessGroup``) registers itself with
:func:`register_group_owner`; the segment then lets such a group set itself up and waits
for the reductions it has queued, through the small :class:`GroupOwner` protocol.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import logging
import math
import os
import secrets
import threading
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

import torch
import torch.distributed as dist

from accel.comm import _torch_dist as tdist
from accel.comm._link import Members, TorchGroup
from accel.comm._nodes import NODE_ENV, node_identity
from accel.comm._spanning import Spanning, build, placement
from accel.ops._dtypes import dtype_codes
from accel.ops.isa import load_native

_log = logging.getLogger("accel.comm")
# torch's graph-break decorator (untyped) and its internal-overlap check (private), as Any.
_torch: Any = torch

# Per rank and buffer; larger messages go in chunks, with two rank barriers per chunk.
# Fewer, larger chunks mean fewer barriers (docs/benchmarks.md, "Slot size"); the segment
# (2 buffers x world x this) is memfd memory, allocated only where touched.
SLOT_BYTES = 16 << 20

POOL_ENV = "ACCEL_SHM_POOL_BYTES"
# Each rank's pool, where accel.comm.shared_empty places tensors: address space only until
# a tensor touches it (memfd pages come on first write), so a generous default costs nothing.
DEFAULT_POOL_BYTES = 1 << 30


def pool_bytes() -> int:
    """Each rank's pool in a group's segment, in bytes: ``ACCEL_SHM_POOL_BYTES`` (0: no
    pool), else 1 GiB. Rank 0's value sizes a group's segment.

    Raises:
        ValueError: The variable is not a decimal number of bytes >= 0, a multiple of 4096.
    """
    raw = os.environ.get(POOL_ENV, str(DEFAULT_POOL_BYTES))
    text = raw.strip()  # ASCII decimal digits only, as every integer variable of accel's
    if text.isascii() and text.isdigit() and int(text) % 4096 == 0:
        return int(text)
    raise ValueError(
        f"environment variable {POOL_ENV} must be a decimal number of bytes >= 0 and a "
        f"multiple of 4096, got {raw!r}"
    )


class GroupOwner(Protocol):
    """What the segment layer needs from a process group that runs collectives on it."""

    def uses_shared_memory(self) -> bool:
        """Set the group's segment up (collectively, on first call); whether it has one."""
        ...

    def in_own_collective(self) -> bool:
        """Whether this thread is inside one of the group's own segment calls."""
        ...

    def wait_queued(self) -> None:
        """Wait for the reductions the group has queued."""
        ...

    def collective_timeout(self) -> float:
        """The group's timeout in seconds (what ``init_process_group`` was given)."""
        ...


_owner_types: tuple[type, ...] = ()


def register_group_owner(group_type: type[GroupOwner]) -> None:
    """Declare ``group_type`` (a ``dist.ProcessGroup`` subclass) a :class:`GroupOwner`:
    direct calls with such a group let it set its segment up and keep its queue's order."""
    global _owner_types
    if group_type not in _owner_types:
        _owner_types = (*_owner_types, group_type)


def as_owner(process_group: dist.ProcessGroup) -> GroupOwner | None:
    """``process_group`` if its class registered as an owner, else None."""
    return cast(GroupOwner, process_group) if isinstance(process_group, _owner_types) else None


@dataclass
class ShmGroup:
    """One group's segment, and what a call on it needs to know."""

    communicator: Any  # accel.ops._shm_comm.Communicator
    key: int  # names the group to the compiled op (accel::shm_all_reduce_)
    # Who falls back to gloo together when a call cannot use the segment. A TorchGroup
    # holds its group weakly: the segment lives as long as its process group, not longer.
    members: Members
    codes: dict[torch.dtype, int]  # the dtypes the segment sums, and their codes
    timeout: float  # the group's own timeout, seconds: a call's default
    # A group whose queued reductions run on its worker thread: a call made straight to
    # accel.comm with it waits for them (one order on the segment).
    owner: weakref.ref[GroupOwner] | None = None
    pooled: bool = False  # whether a tensor was placed in this rank's pool yet (for the log)

    def finish_queued(self) -> None:
        """Wait for the owning group's queued reductions, if any."""
        if self.owner is not None:
            _wait_queued(self.owner)

    def seconds(self, timeout: float | None) -> float:
        """A call's timeout in seconds: ``timeout``, or the group's when it is None."""
        return self.timeout if timeout is None else float(timeout)


def _wait_queued(owner: weakref.ref[GroupOwner]) -> None:
    """Wait for the reductions a group has queued (nothing if it is gone)."""
    group = owner()
    if group is not None:
        group.wait_queued()


_lock = threading.Lock()  # guards _setup_locks only
_setup_locks: dict[int, threading.Lock] = {}  # per group, while and after it is set up
# Keyed by id() of the process group; an entry leaves when its group is garbage (see
# _remember), so a destroyed group's segment is unmapped instead of kept for the process's
# lifetime. None: the group is not node-local.
_groups: dict[int, ShmGroup | None] = {}
_by_key: dict[int, ShmGroup] = {}
_spanning: dict[int, Spanning] = {}  # groups on several nodes, same keys as _groups
_owners: dict[int, weakref.ref[GroupOwner]] = {}  # groups that queue work, same keys
_keys = itertools.count(1)


@functools.cache
def summable_codes() -> dict[torch.dtype, int]:
    """The dtypes the shared-memory path sums; none when the extension is not built."""
    try:
        _shm_comm = load_native("accel.ops._shm_comm")
    except ImportError:
        return {}
    return dtype_codes(_shm_comm)


@functools.cache
def wire_code(dtype: torch.dtype) -> int:
    """A dtype's code in the segment's announcements (summable or not)."""
    _shm_comm = load_native("accel.ops._shm_comm")
    name = str(dtype).removeprefix("torch.")
    other: int = _shm_comm.OTHER_DTYPES.get(name, _shm_comm.UNKNOWN_DTYPE)
    return summable_codes().get(dtype, other)


def by_key(key: int) -> ShmGroup:
    """The segment whose :attr:`ShmGroup.key` is ``key`` (how the compiled op finds it)."""
    return _by_key[key]


def _gather_text(text: str, members: Members) -> list[str]:
    # Plain tensor collectives: the *_object ones need numpy, which accel does not.
    data = text.encode()
    if len(data) > 256:
        raise ValueError(f"identity too long to exchange: {text!r}")
    mine = torch.zeros(256, dtype=torch.uint8)
    mine[: len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    gathered = [torch.empty_like(mine) for _ in range(members.size())]
    members.all_gather(gathered, mine)
    return [ctypes.string_at(t.data_ptr(), t.numel()).rstrip(b"\0").decode() for t in gathered]


def _open(
    path: str, create: bool, rank: int, world: int, session: int, pids: list[int], pool: int
) -> tuple[Any, str]:
    try:
        _shm_comm = load_native("accel.ops._shm_comm")

        communicator = _shm_comm.Communicator(
            path=path, create=create, rank=rank, world=world, slot_bytes=SLOT_BYTES,
            session=session, pids=pids, pool_bytes=pool,
        )  # fmt: skip
        return communicator, ""
    except (ImportError, RuntimeError, OSError) as failure:
        return None, f"{type(failure).__name__}: {failure}"


def _cpu_capable(group: dist.ProcessGroup | None) -> bool:
    """Whether ``group`` runs collectives on CPU tensors (not so for a pure NCCL group)."""
    process_group = group if group is not None else dist.group.WORLD
    assert process_group is not None  # initialised: the caller checked
    if as_owner(process_group) is not None:  # gloo underneath
        return True
    try:
        process_group._get_backend(torch.device("cpu"))  # pyright: ignore[reportPrivateUsage]
    except (RuntimeError, AttributeError):
        return False
    return True


def _group_timeout(process_group: dist.ProcessGroup) -> float:
    """The timeout ``process_group`` was made with, in seconds (torch's default when its
    backend does not say)."""
    owner = as_owner(process_group)
    if owner is not None:
        return owner.collective_timeout()
    try:
        backend: Any = process_group._get_backend(torch.device("cpu"))  # pyright: ignore[reportPrivateUsage]
        return float(backend.options._timeout.total_seconds())
    except (RuntimeError, AttributeError):
        return dist.default_pg_timeout.total_seconds()


_NO_NODE = "!"  # a rank whose node identity is invalid (a valid one is never "!")


def _setup(group: dist.ProcessGroup | None) -> ShmGroup | Spanning | None:
    members = TorchGroup(group)
    world = members.size()
    if world == 1 or not _cpu_capable(group):
        return None  # nothing to exchange, or no CPU collectives to exchange it with
    process_group = group if group is not None else dist.group.WORLD
    assert process_group is not None  # initialised: the caller checked
    timeout = _group_timeout(process_group)
    # Rank 0's token names the links of a group that spans nodes (every rank takes it
    # from rank 0's identity), so no other group's links share their store keys.
    token = secrets.token_hex(8)
    try:
        node, bad_node = node_identity(), None
    except ValueError as error:  # told to every rank first: alone, it would leave them waiting
        node, bad_node = _NO_NODE, error
    identities = _gather_text(f"{node} {os.getpid()} {token}", members)
    nodes = [identity.rsplit(" ", 2)[0] for identity in identities]
    if bad_node is not None:
        raise bad_node
    bad = [rank for rank, node in enumerate(nodes) if node == _NO_NODE]
    if bad:
        raise ValueError(
            f"environment variable {NODE_ENV} is not usable on group rank(s) {bad} (their own "
            "error names the value): every rank of a group needs a valid value or none"
        )
    pids = [int(identity.rsplit(" ", 2)[1]) for identity in identities]
    if any(node != nodes[0] for node in nodes):
        # Ranks on several nodes: one segment cannot reach them all; one per node can.
        ranks = dist.get_process_group_ranks(process_group)
        where = placement(nodes, ranks)
        me = ranks[members.rank()]
        # The links meet on the store: on a client of this set-up's own, since another
        # group may be set up beside this one (from another thread, or on its worker).
        store = tdist.own_client(tdist.group_store(process_group))
        spanning = build(where, me, timeout, store, identities[0].rsplit(" ", 1)[1])
        if spanning is not None:
            node_pids = [pids[ranks.index(member)] for member in spanning.local.ranks]
            spanning.local_shm = _attach(spanning.local, node_pids, timeout)
        return spanning
    return _attach(members, pids, timeout)


def _pool_bytes_for(world: int) -> int:
    """:func:`pool_bytes`, also checked to give a segment ``world`` ranks can map.

    Raises:
        ValueError: As :func:`pool_bytes`; or the segment would pass the extension's limit.
    """
    pool = pool_bytes()
    try:
        _shm_comm = load_native("accel.ops._shm_comm")
    except ImportError:
        return pool  # no segment at all: _open says so, and every rank falls back
    try:
        _shm_comm.Communicator.segment_bytes(world, SLOT_BYTES, pool)
    except ValueError:
        # The largest pool that fits: the segment without pools, then equal shares.
        bare = _shm_comm.Communicator.segment_bytes(world, SLOT_BYTES, 0) - world * 4096
        largest = ((_shm_comm.MAX_SEGMENT_BYTES - bare) // world - 4096) // 4096 * 4096
        raise ValueError(
            f"environment variable {POOL_ENV}={os.environ.get(POOL_ENV)!r} is too large for a "
            f"group of {world} ranks on one node: their segment would pass "
            f"{_shm_comm.MAX_SEGMENT_BYTES} bytes of address space; at most {largest} fits"
        ) from None
    return pool


def _agreed_pool_bytes(members: Members) -> int:
    """Each rank's pool size, checked on every rank before any rank maps anything: a rank
    whose variable is bad raises its own error, and the others an error naming it (a
    lone error would leave them waiting in the set-up's next exchange). Rank 0's value
    sizes the segment. Collective."""
    try:
        pool, error = _pool_bytes_for(members.size()), None
    except ValueError as failure:
        pool, error = 0, failure
    usable = [torch.zeros(1, dtype=torch.int32) for _ in range(members.size())]
    members.all_gather(usable, torch.tensor([0 if error else 1], dtype=torch.int32))
    if error is not None:
        raise error
    bad = [rank for rank, ok in enumerate(usable) if int(ok) == 0]
    if bad:
        raise ValueError(
            f"environment variable {POOL_ENV} is not usable on group rank(s) {bad} (their "
            f"own error names the value); this rank's is {pool}: every rank of a group needs "
            "a valid value"
        )
    return pool


def _attach(members: Members, pids: list[int], timeout: float) -> ShmGroup | None:
    """Map one segment shared by ``members`` (all on this node; ``pids`` their process
    ids, in member order), or None on every member if any of them cannot. Collective."""
    rank, world = members.rank(), members.size()
    pool = _agreed_pool_bytes(members)
    offer = torch.zeros(3, dtype=torch.int64)  # rank 0's descriptor, session id, pool size
    communicator: Any = None
    error = ""
    if rank == 0:
        # Create before announcing: the broadcast is what lets peers attach.
        session = secrets.randbits(63)
        communicator, error = _open("", True, rank, world, session, pids, pool)
        if communicator is not None:
            offer[0] = int(communicator.path().rsplit("/", 1)[1])
            offer[1] = session
            offer[2] = pool
        else:
            offer[0] = -1  # tells the peers not to attach
    members.broadcast(offer, 0)
    if rank != 0 and int(offer[0]) >= 0:
        path = f"/proc/{pids[0]}/fd/{int(offer[0])}"
        communicator, error = _open(path, False, rank, world, int(offer[1]), pids, int(offer[2]))
    elif rank != 0:
        error = "rank 0 could not create the segment"
    # Everyone must agree: one rank without the segment means all fall back.
    attached = torch.tensor([0 if error else 1], dtype=torch.int32)
    members.all_reduce(attached, dist.ReduceOp.MIN)
    if rank == 0 and communicator is not None:
        communicator.release()  # every rank has mapped it (or given up): no one else may open it
    if int(attached) == 0:
        if error:
            warnings.warn(
                f"accel.comm: shared memory unavailable ({error}); using torch.distributed",
                stacklevel=4,
            )
        return None
    return ShmGroup(
        communicator, key=next(_keys), members=members, codes=summable_codes(), timeout=timeout
    )


def shm_group(group: dist.ProcessGroup | None, call: str) -> ShmGroup | None:
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
        # A group with queued work (node-local or not) finishes it first: one order on
        # every rank. (While torch.compile traces, the op waits instead, when it runs.)
        queued = _owners.get(id(process_group))
        if queued is not None and not torch.compiler.is_compiling():
            _wait_queued(queued)
        return known
    return _first_use(group, process_group, call)


_F = TypeVar("_F", bound=Callable[..., Any])


def _not_traced(function: _F) -> _F:
    """``function`` with a graph break around it: while torch.compile traces a call, it
    runs eagerly instead of being traced. ``torch.compiler.disable`` imports torch._dynamo
    (over a second of CPU: ``python -X importtime -c "import torch._dynamo"``), which every
    rank would pay at ``import accel.comm``; it is applied at each call made while
    ``torch.compiler.is_compiling()`` instead, when torch._dynamo is loaded anyway. Nothing
    is kept between calls, so nothing is guarded on and a later call compiles nothing again;
    a trace breaks its graph at ``disable`` itself, which under ``fullgraph=True`` is the
    error dynamo names (a set-up cannot be traced either way)."""

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not torch.compiler.is_compiling():
            return function(*args, **kwargs)
        return _torch.compiler.disable(function)(*args, **kwargs)

    return cast(_F, call)


# The set-up (collectives on a process group, ctypes, a native segment) cannot be traced.
@_not_traced
def _first_use(
    group: dist.ProcessGroup | None, process_group: dist.ProcessGroup | None, call: str
) -> ShmGroup | None:
    """:func:`shm_group` for a group not set up yet (or a rank outside it: None)."""
    tdist.check_group(group, call)
    if process_group is None or not dist.is_initialized():
        raise RuntimeError(f"{call}() needs torch.distributed.init_process_group() first")
    if tdist.not_member(group):
        return None  # the caller's torch.distributed fallback warns and does nothing
    owner = as_owner(process_group)
    if owner is not None and not owner.in_own_collective():
        # Called straight, not by the group: the group sets the segment up (it comes back
        # here from inside), so that the setup's own collectives go to its gloo; set up
        # from here, they would come back through the group and wait on _lock.
        owner.uses_shared_memory()
        return _groups[id(process_group)]
    # One lock per group: a group's set-up waits for its peers, and must never wait for
    # another group's (two threads each setting up a group, in either order per rank).
    with _lock:
        setting_up = _setup_locks.setdefault(id(process_group), threading.Lock())
    with setting_up:
        if id(process_group) not in _groups:
            _remember(process_group, _setup(group))
        return _groups[id(process_group)]


def shm_timeout(group: dist.ProcessGroup | None, timeout: float | None) -> float:
    """A call's timeout in seconds: ``timeout``, or ``group``'s own when it is None."""
    if timeout is not None:
        return float(timeout)
    process_group = group if group is not None else dist.group.WORLD
    assert process_group is not None  # initialised: the caller checked
    return _group_timeout(process_group)


def segment_of(group: dist.ProcessGroup) -> ShmGroup | None:
    """The segment of a node-local ``group`` set up already (None otherwise); unlike
    :func:`shm_group`, it neither sets up nor waits for the group's queued work."""
    return _groups.get(id(group))


def spanning_of(group: dist.ProcessGroup | None) -> Spanning | None:
    """The two levels of a group that spans nodes (None: node-local, not yet set up by
    :func:`shm_group`, or one rank per node)."""
    return _spanning.get(id(group if group is not None else dist.group.WORLD))


def _remember(process_group: dist.ProcessGroup, found: ShmGroup | Spanning | None) -> None:
    """Keep what ``_setup`` found for ``process_group`` until the group is garbage."""
    ident = id(process_group)
    if isinstance(found, Spanning):
        _spanning[ident] = found
    shm = found if isinstance(found, ShmGroup) else None
    owner = as_owner(process_group)
    if owner is not None:
        _owners[ident] = weakref.ref(owner)
    if shm is not None:
        _by_key[shm.key] = shm
        shm.owner = _owners.get(ident)
    # Last: a group's set-up may run on its worker while the caller's thread looks it up,
    # and a group found here must come with its owner (whose queue the caller waits for).
    _groups[ident] = shm
    # Runs when the group object dies (torch drops it in destroy_process_group), before
    # its id can be reused; the Communicator unmaps the segment when the last reference
    # to it goes (a collective still running holds one).
    forget = weakref.finalize(process_group, _forget, ident, shm.key if shm else None)
    forget.atexit = False  # at exit the mappings go with the process


def release(process_group: dist.ProcessGroup) -> None:
    """Drop what accel keeps for ``process_group`` now (its segment, its links and their
    hold on the group's store), not when the group object is garbage: a group shut down
    must let go of the store before ``init_process_group`` can meet on it again."""
    shm = _groups.get(id(process_group))
    _forget(id(process_group), shm.key if shm is not None else None)


def _forget(ident: int, key: int | None) -> None:
    _setup_locks.pop(ident, None)
    _groups.pop(ident, None)
    _spanning.pop(ident, None)
    _owners.pop(ident, None)
    if key is not None:
        _by_key.pop(key, None)


def summable(tensor: torch.Tensor, code: int | None) -> bool:
    """Whether ``tensor`` (whose dtype has segment code ``code``) can be summed through the
    segment: a dense CPU tensor of a summable dtype (a sparse one goes to gloo, which sums
    it; one whose elements share memory is refused before, :func:`refuse_shared_elements`)."""
    return code is not None and tensor.is_cpu and tensor.layout == torch.strided


def write_back(tensor: torch.Tensor, result: torch.Tensor) -> None:
    """Copy a collective's ``result`` (worked on in a contiguous copy) into ``tensor``, as
    gloo writes into it: whatever autograd or inference mode would say of an in-place op
    (a leaf that requires grad, an inference tensor) takes the result too."""
    inference = torch.inference_mode() if tensor.is_inference() else contextlib.nullcontext()
    with torch.no_grad(), inference:
        tensor.copy_(result)


def refuse_shared_elements(tensor: torch.Tensor, argument: str) -> None:
    """``ValueError`` for a tensor whose elements share memory (``expand``): a sum cannot
    be written into it, and gloo, given one, reads and writes past its storage."""
    if _torch._debug_has_internal_overlap(tensor) == 1:
        raise ValueError(
            f"{argument} has elements that share memory (an expanded view, strides "
            f"{tuple(tensor.stride())}); give the collective a tensor with memory of its own "
            "(.clone())"
        )


def contiguous_work(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` where a collective can work in its memory as it lies (gloo and the
    segment both do), else a contiguous copy to work in and :func:`write_back`;
    ``ValueError`` before anything moves for a tensor whose elements share memory."""
    if tensor.layout == torch.strided and not tensor.is_contiguous():
        refuse_shared_elements(tensor, "tensor")
        return tensor.contiguous()
    return tensor


def reduce(shm: ShmGroup, tensor: torch.Tensor, timeout: float) -> None:
    """Sum through the segment if every rank can, else ``dist.all_reduce`` on every rank
    (on a contiguous copy: gloo takes a tensor's memory as it lies)."""
    code = shm.codes.get(tensor.dtype)
    eligible = summable(tensor, code)
    work = contiguous_work(tensor)
    # Positional: pybind11 matches keywords by name, a measurable share of a small call.
    done = shm.communicator.all_reduce(
        work.data_ptr() if eligible else 0, work.numel(),
        code if code is not None else wire_code(tensor.dtype), eligible, timeout,
    )  # fmt: skip
    if not done:  # some rank's tensor cannot use the segment: all ranks fall back
        shm.members.all_reduce(work, timeout=timeout)
    if work is not tensor:
        write_back(tensor, work)


def pooled_empty(shm: ShmGroup, size: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
    """An uninitialised tensor in this rank's pool of ``shm``'s segment, or None when the
    pool has no free range that large. The tensor holds its block (and the mapping) until
    it is garbage; the block then goes back to the pool."""
    numel = math.prod(size)
    block = shm.communicator.allocate(numel * dtype.itemsize)
    if block is None:
        return None
    if not shm.pooled:
        shm.pooled = True
        _log.debug(
            "accel.comm: tensors of group %d live in its segment (pools of %d MiB); an "
            "all-reduce whose tensors all do sums straight between them",
            shm.key, shm.communicator.pool_bytes >> 20,
        )  # fmt: skip
    return torch.frombuffer(block, dtype=dtype, count=numel).view(size)
