"""DDP's gradient buckets, moved into the group's pool in place.

DDP's reducer all-reduces the same bucket tensors every step. When every rank's bucket
lives in its pool of the group's segment, the all-reduce goes straight between the ranks'
buckets (the pooled path, docs/benchmarks.md) instead of through the segment's slots.
``torch.UntypedStorage._swap_data_ptr_`` exchanges the memory of two storages in place:
the bucket's storage takes a pool block holding a copy of its bytes, and every tensor and
view on that storage follows, those only C++ holds (the reducer's) included. Its old
memory is freed. No rank has to agree: a rank whose bucket is not in its pool takes the
copying path for that call, and so does every rank with it.

Freeing the old memory is safe only when nothing else can still reach it, so a storage
moves only when it is provably the reducer's own:

- the call comes from the autograd engine: the reducer's built-in all-reduce runs in C++
  from it, so the Python frame that calls the process group is the engine's entry point (a
  comm hook, or any direct call, is a different frame and is never moved). Other C++ code
  the engine runs (a TorchScript hook reducing a buffer of its own) passes this too: the
  use counts below tell a bucket from it;
- a ``DistributedDataParallel`` on this group is known: the group records each one while
  it is constructed (``_ddp_init_helper`` asks the group's backend name, with or without
  ``init_sync``);
- the storage is whole, contiguous and ordinary: torch's allocator made it (``resizable``:
  not ``from_numpy``/``frombuffer``/``from_blob``/``from_file``, not a storage accel.io is
  reading into, not already in a pool), not shared (``share_memory_``), not pinned;
- it is seen a second time (the same storage, alive since the first sight): DDP rebuilds
  its buckets after the first iteration, so a bucket is worth moving from its second sight;
- no one outside the reducer holds it, and it is a bucket. The reduced tensor's own use
  count must be its storage's plus two (the reducer's views keep their base), so a DLPack
  export of the bucket itself (a bucket-view ``.grad``'s ``_base``) keeps it. With
  ``gradient_as_bucket_view=False`` the bucket is reachable only from C++ (``param.grad``
  is a copy), and its storage's use count must be a bucket's of one or more parameters.
  With
  ``gradient_as_bucket_view=True`` every ``param.grad`` of the bucket is a view of it that
  users can hand on (``.numpy()``, ``memoryview``, DLPack, a raw pointer in an extension).
  A tensor made on the storage raises the storage's use count, so that count must be
  exactly the reducer's: the bucket, its input views and its output views (one each per
  parameter in the bucket). A DLPack export of a ``.grad`` makes no tensor on the storage
  but holds the ``.grad`` itself, so each ``.grad``'s own use count must be the
  reducer's too. One more anywhere, and the bucket stays where it is. The parameters are
  counted from their ``.grad`` views, so those must cover the whole bucket; while some
  are unset (parameters unused this step), or none is set and a bucket-view model on the
  group may own it, nothing is known yet and the bucket is looked at again at its next sight
  (up to ``DEFERRALS`` times).

A bucket-view bucket's old memory stays allocated until its next sight, a step later: a
kernel another thread started on a ``.grad`` before the swap still reads it.
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef as _StorageWeakRef

from accel._validate import env_switch

_log = logging.getLogger("accel.comm")
# torch's private storage internals (a StorageImpl's address and use count), as Any.
_torch: Any = torch
StorageWeakRef: Any = _StorageWeakRef  # untyped in torch

# torch 2.13 has it; without it nothing moves (the copying path, as before).
SWAPPABLE = hasattr(torch.UntypedStorage, "_swap_data_ptr_")
ENV = "ACCEL_DDP_POOL"


def enabled() -> bool:
    """Whether DDP's buckets may move: ``ACCEL_DDP_POOL`` is ``1`` (the default) or ``0``.

    Raises:
        ValueError: The variable is set to anything else.
    """
    return env_switch(ENV, default=True)


# Below this a bucket gains nothing worth a pool block (docs/benchmarks.md: the pooled
# path is ahead of the copying one from 4 KiB).
MIN_BYTES = 4096
# Moves stop while they would leave less than this share of the pool free, so that
# accel.comm.shared_empty keeps room for the tensors a user places there.
RESERVED_SHARE = 4
# A bucket that cannot be judged yet is looked at again this many times, then stays.
DEFERRALS = 8
# The holders of a bucket-view ``.grad`` (its TensorImpl) when no one else has it: the
# parameter's grad slot, the reducer's input view (the same tensor) and the Python object
# it is read through. Measured on torch 2.13's reducer (tests/comm/scripts/ddp_pool_check.py
# fails if that changes: its buckets would stop moving, or DLPack holders would not stop them).
GRAD_OWN_USES = 3
# The holders of a bucket's storage when no one else has it: the Python storage object the
# checks read it through, the bucket tensor, and per parameter an input and an output view;
# and of the bucket tensor (its TensorImpl): as many, plus two (the views keep their base).
# Measured the same way, with and without gradient_as_bucket_view.
STORAGE_OWN_USES_BASE = 2
BUCKET_OVER_STORAGE_USES = 2


def _address(storage: Any) -> int:
    """Which StorageImpl ``storage`` (a Python storage object, one of many) is."""
    return int(storage._cdata)


def caller(frame: FrameType | None) -> FrameType | None:
    """The frame that called ``frame``'s function (from ``inspect.currentframe()``)."""
    return frame.f_back if frame is not None else None


def _code_of(qualified: str, attribute: str) -> Any:
    """The code object of ``module.attribute`` (None when torch moved it: nothing moves)."""
    found: Any = sys.modules.get(qualified)
    for name in attribute.split("."):
        found = getattr(found, name, None)
    return getattr(found, "__code__", None)


@dataclass
class _Sighting:
    """A storage the group has been asked to reduce, and whether it moved."""

    storage: Any  # a StorageWeakRef: whether the storage is still alive
    nbytes: int
    moved: bool = False
    refused: str = ""  # why it stays, said once
    deferred: int = 0  # sights at which it could not be judged yet
    block: Any = None  # a weak reference to the pool block it took: alive while in the pool
    retired: torch.Tensor | None = None  # its old memory, freed at the next sight


@dataclass
class Promotions:
    """One group's record of the DDP models on it and the bucket storages it has seen."""

    enabled: bool = True
    """Whether buckets may move at all (``ACCEL_DDP_POOL``)."""
    moved_buffers: int = 0
    """Bucket storages moved into this rank's pool so far."""
    moved_bytes: int = 0
    """Their bytes."""
    _models: weakref.WeakSet[torch.nn.Module] = field(default_factory=weakref.WeakSet)
    _seen: dict[int, _Sighting] = field(default_factory=dict)

    def note_construction(self, frame: FrameType | None) -> None:
        """Record the ``DistributedDataParallel`` being constructed, if ``frame`` (the
        Python caller of the group's ``getBackendName``) or one of its three callers is its
        ``__init__``."""
        init = _ddp_init_code()
        for _ in range(4):
            if frame is None or init is None:
                return
            if frame.f_code is init:
                model = frame.f_locals.get("self")
                if isinstance(model, torch.nn.Module):
                    self._models.add(model)
                return
            frame = frame.f_back

    def consider(self, tensor: torch.Tensor, caller: FrameType | None, shm: Any) -> bool:
        """Move ``tensor``'s storage into this rank's pool of ``shm`` if it is provably
        the reducer's own bucket, seen before (see the module's docstring).

        ``caller`` is the Python frame that called the group's ``allreduce``. Call it only
        when no reduction of ``tensor`` is queued or running. Returns whether it moved."""
        if (
            not (SWAPPABLE and self.enabled)
            or caller is None
            or caller.f_code is not _engine_code()
        ):
            return False
        if not self._models or not tensor.is_cpu or tensor.layout != torch.strided:
            return False
        storage = tensor.untyped_storage()
        nbytes = storage.nbytes()
        key = _address(storage)
        sighting = self._seen.get(key)
        if sighting is None or sighting.storage.expired() or sighting.nbytes != nbytes:
            self._remember(key, _Sighting(StorageWeakRef(storage), nbytes))
            return False
        if sighting.moved:
            sighting.retired = None  # a step since the move: no kernel still reads it
            return False
        if sighting.refused:
            return False
        why = self._refusal(tensor, storage, shm)
        if why is None:
            why, final = self._not_owned(tensor, storage)
            if why and not final:
                sighting.deferred += 1
                if sighting.deferred < DEFERRALS:
                    return False
                why = f"{why}, at {DEFERRALS} sights"
        if not why:
            # Bucket views are .grads other threads may be reading: the old memory stays
            # until the next sight. A copying model's bucket only C++ reaches: freed now.
            keep_old = next(self._grads_on(storage), None) is not None
            why = _move(storage, shm, sighting, keep_old)
        if why:
            sighting.refused = why
            _log.debug(
                "accel.comm: a %d-byte tensor DDP's reducer all-reduces stays out of the pool: %s",
                nbytes, why,
            )  # fmt: skip
            return False
        sighting.moved = True
        self.moved_buffers += 1
        self.moved_bytes += nbytes
        return True

    def pooled(self) -> list[int]:
        """The sizes in bytes of the moved buckets whose memory is still in the pool (not
        freed with the bucket, nor moved out by ``share_memory_()``)."""
        return [s.nbytes for s in self._seen.values() if s.moved and s.block() is not None]

    def _remember(self, key: int, sighting: _Sighting) -> None:
        self._seen[key] = sighting
        # Buckets DDP dropped when it rebuilt them, and the old memory of those that moved.
        if len(self._seen) > 256 or any(s.retired is not None for s in self._seen.values()):
            self._seen = {k: s for k, s in self._seen.items() if not s.storage.expired()}

    def _refusal(self, tensor: torch.Tensor, storage: torch.UntypedStorage, shm: Any) -> str | None:
        """Why ``tensor``'s storage may not move (None: it may)."""
        nbytes = storage.nbytes()
        if tensor.dtype not in shm.codes:
            return f"dtype {tensor.dtype} is not summed in shared memory"
        if nbytes < MIN_BYTES:
            return f"smaller than {MIN_BYTES} bytes"
        whole = tensor.storage_offset() == 0 and tensor.numel() * tensor.element_size() == nbytes
        if not (whole and tensor.is_contiguous()):
            return "the tensor is not its whole storage, contiguous"
        if not storage.resizable():
            return (
                "its memory is not torch's allocator's own (numpy, frombuffer, a file, a transfer)"
            )
        if storage.is_shared() or storage.is_pinned():
            return "its memory is shared or pinned already"
        return None

    def _not_owned(self, tensor: torch.Tensor, storage: torch.UntypedStorage) -> tuple[str, bool]:
        """Why ``tensor`` (the reduced tensor) and its ``storage`` are not provably the
        reducer's own bucket ("" when they are), and whether that is final (False: not
        known yet, looked at again at the next sight)."""
        storage_uses = _torch._C._storage_Use_Count(_address(storage))
        grads = list(self._grads_on(storage))
        if grads:
            held = sum(1 for grad in grads if _uses(grad) != GRAD_OWN_USES)
            if held:
                return f"{held} parameter .grad(s) are held outside DDP (a DLPack export)", True
            if sum(grad.numel() * grad.element_size() for grad in grads) != storage.nbytes():
                return "some of its parameters have no .grad (unused in this step)", False
            # Every parameter of the bucket has its .grad on it: the reducer's count is exact.
            outside = storage_uses - STORAGE_OWN_USES_BASE - 2 * len(grads)
            if outside:
                return (
                    f"{outside} tensor(s) outside DDP hold it (a view, a numpy array or "
                    "memoryview of a parameter's .grad)"
                ), True
        elif any(getattr(m, "gradient_as_bucket_view", False) for m in list(self._models)):
            return "no .grad is on it and a gradient_as_bucket_view model may own it", False
        else:
            # A copying model's bucket is reachable from C++ only; what the engine runs
            # besides the reducer (a TorchScript hook reducing a buffer of its own) has
            # other counts than a bucket with one or more parameters.
            parameters, odd = divmod(storage_uses - STORAGE_OWN_USES_BASE, 2)
            if odd or parameters < 1:
                return "its storage's use count is not a DDP bucket's", True
        if _uses(tensor) != storage_uses + BUCKET_OVER_STORAGE_USES:
            # A DLPack export of the bucket itself (a bucket-view .grad's ``_base``) holds
            # the bucket tensor, not its storage.
            return "the bucket tensor itself is held outside DDP (a DLPack export)", True
        return "", True

    def _grads_on(self, storage: torch.UntypedStorage) -> Iterator[torch.Tensor]:
        """The ``param.grad`` views on ``storage`` of this group's bucket-view models."""
        for model in list(self._models):
            if not getattr(model, "gradient_as_bucket_view", False):
                continue
            for parameter in model.parameters():
                grad = parameter.grad
                if grad is not None and _address(grad.untyped_storage()) == _address(storage):
                    yield grad


def _uses(tensor: torch.Tensor) -> int:
    """How many hold ``tensor`` itself (its TensorImpl's use count; not in torch's stubs)."""
    untyped: Any = tensor
    return int(untyped._use_count())


def _move(storage: torch.UntypedStorage, shm: Any, sighting: _Sighting, keep_old: bool) -> str:
    """Swap ``storage``'s memory for a pool block holding its bytes ("" when done, else
    why not: no room). With ``keep_old`` the old memory stays allocated until the bucket's
    next sight (a step later), for a kernel another thread started on a ``.grad`` before
    the swap; else it is freed now."""
    communicator = shm.communicator
    nbytes = storage.nbytes()
    free = communicator.pool_free_bytes
    if free - nbytes < communicator.pool_bytes // RESERVED_SHARE:
        return (
            f"the pool has {free} bytes free and keeps a quarter of its "
            f"{communicator.pool_bytes} for shared_empty (ACCEL_SHM_POOL_BYTES sets it)"
        )
    block = communicator.allocate(nbytes)
    if block is None:
        return f"the pool has no free range of {nbytes} bytes"
    pooled = torch.frombuffer(block, dtype=torch.uint8, count=nbytes)
    sighting.block = weakref.ref(block)
    del block  # the tensor's storage holds it from here on
    pooled.copy_(torch.empty(0, dtype=torch.uint8).set_(storage))
    swapping: Any = storage  # _swap_data_ptr_ is not in torch's stubs
    swapping._swap_data_ptr_(pooled.untyped_storage())
    if keep_old:
        sighting.retired = pooled  # now the old memory
    return ""


def _engine_code() -> Any:
    """The code of torch's entry into the autograd engine (the frame above a hook that
    C++ runs during ``backward``)."""
    return _code_of("torch.autograd.graph", "_engine_run_backward")


def _ddp_init_code() -> Any:
    return _code_of("torch.nn.parallel.distributed", "DistributedDataParallel.__init__")
