"""ZeRO-1/2's flat gradient buckets, made in the group's pool.

ZeRO stages 1 and 2 reduce gradients through ``DeepSpeedZeroOptimizer.allreduce_bucket``:
it flattens a bucket of gradients into a new tensor (``self.flatten``, a ``torch.cat``),
all-reduces (or reduces) it, and returns it to its caller, which copies the sums back into
the gradients and drops it. The tensor is new on every call, so the ``"accel"`` backend
never finds it in the pool and copies it through the segment's slots and back. With
:func:`pool_flat_buckets` applied to the class, the one tensor that flatten makes inside
``allreduce_bucket`` is made in this rank's pool of the group's segment
(:func:`accel.comm.try_shared_empty`) when the group's backend is accel's, so the reduction
goes straight between the ranks' tensors, every rank alike. The bytes are the same (a
``torch.cat`` into other memory), and so are the collective and its result.

Nothing else moves, which is how it can never change what another holder sees:

- only that tensor: ``self.flatten`` also makes DeepSpeed's long-lived flat buffers, and
  those keep their memory (the hook is armed for one call, by ``allreduce_bucket`` itself);
- only a new tensor: a bucket of one contiguous tensor flattens to a view of that tensor,
  which the reduction then writes in place (a rank that does not copy the sums back still
  sees them), so such a bucket stays as DeepSpeed made it;
- only with torch's own ``_flatten_dense_tensors`` (ZenFlow's flatten reorders elements),
  CPU tensors of one dtype, at least 4 KiB, and room in the pool.

Every other call is DeepSpeed's own, with no warning. The block goes back to the pool when
the caller drops the tensor. ``ACCEL_ZERO_POOL=0`` turns this off (``0`` or ``1``, read at
each call); :data:`COUNTS` says how many buckets were made in the pool in this process.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from accel._validate import env_switch
from accel.comm import try_shared_empty
from accel.comm._promote import MIN_BYTES

ENV = "ACCEL_ZERO_POOL"


def enabled() -> bool:
    """Whether ZeRO's flat buckets may be made in the pool: ``ACCEL_ZERO_POOL`` is ``1``
    (the default) or ``0``.

    Raises:
        ValueError: The variable is set to anything else.
    """
    return env_switch(ENV, default=True)


@dataclass
class Counts:
    """Flat buckets ``allreduce_bucket`` made in this process."""

    pooled: int = 0
    """In the pool."""
    pooled_bytes: int = 0
    """Their bytes."""
    plain: int = 0
    """Where DeepSpeed makes them (the hook was off, or a condition above did not hold)."""


COUNTS = Counts()
"""This process's counts, for tests and ``accel report``."""

# .group: (the group,) of the allreduce_bucket this thread is in, until its flatten ran
_armed = threading.local()
_on_accel: weakref.WeakKeyDictionary[dist.ProcessGroup, bool] = weakref.WeakKeyDictionary()


def _accel_backend(group: dist.ProcessGroup | None) -> bool:
    """Whether the group's CPU collectives run on accel's backend (``"accel"``, or
    ``"cpu:accel"`` among others): only there does a pooled tensor pay."""
    key = group if group is not None else dist.group.WORLD
    known = _on_accel.get(key) if key is not None else None
    if known is None:
        backend = str(dist.get_backend(group))
        known = backend == "accel" or "cpu:accel" in backend.split(",")
        if key is not None:
            _on_accel[key] = known
    return known


def _flat_in_pool(tensors: Sequence[torch.Tensor], group: Any) -> torch.Tensor | None:
    """``tensors`` flattened into one new tensor in the pool, or None where it may not be."""
    if not tensors or (len(tensors) == 1 and tensors[0].is_contiguous()):
        return None  # torch's flatten gives a view of the one tensor, written in place
    dtype = tensors[0].dtype
    if any(t.dtype != dtype or t.device.type != "cpu" for t in tensors):
        return None
    numel = sum(t.numel() for t in tensors)
    if numel * dtype.itemsize < MIN_BYTES or not _accel_backend(group):
        return None
    flat = try_shared_empty(numel, dtype=dtype, group=group)
    if flat is None:
        return None
    torch.cat([t.reshape(-1) for t in tensors], out=flat)
    return flat


Flatten = Callable[[Sequence[torch.Tensor]], torch.Tensor]


class _PoolingFlatten:
    """An optimizer's ``flatten``, which makes its next result in the pool while
    ``allreduce_bucket`` has armed it on this thread (and DeepSpeed's own otherwise)."""

    def __init__(self, flatten: Flatten) -> None:
        self.flatten = flatten

    def __call__(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        group = getattr(_armed, "group", None)
        if group is None:
            return self.flatten(tensors)
        _armed.group = None  # one call: the bucket's
        flat = _flat_in_pool(tensors, group[0])
        if flat is None:
            COUNTS.plain += 1
            return self.flatten(tensors)
        COUNTS.pooled += 1
        COUNTS.pooled_bytes += flat.numel() * flat.element_size()
        return flat


def pool_flat_buckets(optimizer_class: type) -> None:
    """Make ``optimizer_class.allreduce_bucket``'s flat bucket in the pool (idempotent).

    Args:
        optimizer_class: DeepSpeed's ``DeepSpeedZeroOptimizer`` (stages 1 and 2).

    Raises:
        TypeError: The class has no ``allreduce_bucket`` taking a ``process_group``
            (another DeepSpeed than the supported range).
        ValueError: ``ACCEL_ZERO_POOL`` is set to neither ``0`` nor ``1``.
    """
    original = getattr(optimizer_class, "allreduce_bucket", None)
    if getattr(original, "accel_pooled", False):
        return
    if not callable(original) or "process_group" not in inspect.signature(original).parameters:
        raise TypeError(
            f"{optimizer_class.__qualname__}.allreduce_bucket must take a process_group "
            f"(DeepSpeed 0.19's), got {original!r}"
        )
    enabled()  # a bad value is an error now, not in the middle of a step
    signature = inspect.signature(original)
    # What DeepSpeed binds to self.flatten (torch's, private and untyped).
    torch_utils = importlib.import_module("torch._utils")
    plain_flatten: Flatten = torch_utils._flatten_dense_tensors

    @functools.wraps(original)
    def allreduce_bucket(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not enabled():
            return original(self, *args, **kwargs)
        flatten: object = getattr(self, "flatten", None)
        if not isinstance(flatten, _PoolingFlatten):
            if flatten is not plain_flatten:  # ZenFlow's, or one set by someone else
                return original(self, *args, **kwargs)
            self.flatten = _PoolingFlatten(plain_flatten)
        group = signature.bind(self, *args, **kwargs).arguments.get("process_group")
        _armed.group = (self.dp_process_group if group is None else group,)
        try:
            return original(self, *args, **kwargs)
        finally:
            _armed.group = None

    allreduce_bucket.accel_pooled = True  # type: ignore[attr-defined]
    optimizer_class.allreduce_bucket = allreduce_bucket  # type: ignore[attr-defined]
