"""ZeRO-1/2's flat gradient buckets, made in the group's pool.

ZeRO stages 1 and 2 reduce gradients through ``DeepSpeedZeroOptimizer.allreduce_bucket``:
it flattens a bucket of gradients into a new tensor (``self.flatten``, a ``torch.cat``),
all-reduces it (or reduces it to one rank), and returns it to its caller, which copies the
sums back into the gradients and drops it. The tensor is new on every call, so the
``"accel"`` backend never finds it in the pool and copies it through the segment's slots
and back. With :func:`pool_flat_buckets` applied to the class, the one tensor that flatten
makes inside an all-reducing ``allreduce_bucket`` is made in this rank's pool of the
group's segment (:func:`accel.comm.try_shared_empty`) when the group's backend is accel's;
when every rank's is, the all-reduce goes straight between the ranks' tensors (else every
rank takes the copying path for that call). The bytes are the same (a ``torch.cat`` into
other memory), and so are the collective and its result.

Nothing else moves, which is how it can never change what another holder sees:

- only that tensor: ``self.flatten`` also makes DeepSpeed's long-lived flat buffers, and
  those keep their memory (the hook is armed for one call, by ``allreduce_bucket`` itself);
- only a new tensor: a bucket of one contiguous tensor flattens to a view of that tensor,
  which the reduction then writes in place (a rank that does not copy the sums back still
  sees them), so such a bucket stays as DeepSpeed made it;
- only where the pool pays: an all-reduce (``rank`` given is a reduce, which runs on gloo)
  of the bucket itself (a bucket reduced in another dtype is reduced on a copy);
- only with torch's own ``_flatten_dense_tensors`` (ZenFlow's flatten reorders elements),
  CPU tensors of one dtype and no autograd, at least 4 KiB, and room in the pool.

Every other call is DeepSpeed's own, with no warning. The block goes back to the pool when
the caller drops the tensor (its pages stay with the pool for the next bucket).
``ACCEL_ZERO_POOL=0`` turns this off (``0`` or ``1``, read at each call; anything else is an
error when DeepSpeed is put on accel); :data:`COUNTS` counts the calls by where their bucket
was made.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from accel.comm import try_shared_empty
from accel.comm._promote import MIN_BYTES
from accel.comm._segment import as_owner
from accel.integrations.deepspeed._support import zero_pool_enabled


@dataclass
class Counts:
    """``allreduce_bucket`` calls in this process, by where their flat bucket was made."""

    pooled: int = 0
    """In the pool."""
    pooled_bytes: int = 0
    """Their bytes."""
    plain: int = 0
    """Where DeepSpeed makes it: the switch was off, or a condition of this module's
    docstring did not hold."""


COUNTS = Counts()
"""This process's counts, for tests and ``accel report``."""

# .call: (the group, the dtype reduced) of the allreduce_bucket this thread is in, until
# its flatten has run; .pooled: whether that flatten made its tensor in the pool.
_armed = threading.local()


def _accel_backend(group: dist.ProcessGroup | None) -> bool:
    """Whether the group is accel's backend (``"accel"``, or ``"cpu:accel"`` among others,
    where torch hands back accel's group itself): only there does a pooled tensor pay."""
    process_group = group if group is not None else dist.group.WORLD
    return process_group is not None and as_owner(process_group) is not None


def _flat_in_pool(
    tensors: Sequence[torch.Tensor], group: Any, reduced: torch.dtype
) -> torch.Tensor | None:
    """``tensors`` flattened into one new tensor in the pool, or None where it may not be.
    ``reduced`` is the dtype the bucket is reduced in (another is reduced on a copy)."""
    if not tensors or (len(tensors) == 1 and tensors[0].is_contiguous()):
        return None  # torch's flatten gives a view of the one tensor, written in place
    dtype = tensors[0].dtype
    if dtype != reduced or any(t.dtype != dtype or t.device.type != "cpu" for t in tensors):
        return None
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return None  # cat(out=) takes no autograd; DeepSpeed's flatten does
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
        call = getattr(_armed, "call", None)
        if call is None:
            return self.flatten(tensors)
        _armed.call = None  # one call: the bucket's
        flat = _flat_in_pool(tensors, *call)
        if flat is None:
            return self.flatten(tensors)
        _armed.pooled = True
        COUNTS.pooled_bytes += flat.numel() * flat.element_size()
        return flat


def pool_flat_buckets(optimizer_class: type) -> None:
    """Make ``optimizer_class.allreduce_bucket``'s flat bucket in the pool (idempotent).

    Args:
        optimizer_class: DeepSpeed's ``DeepSpeedZeroOptimizer`` (stages 1 and 2).

    Raises:
        TypeError: The class has no ``allreduce_bucket`` taking
            ``communication_data_type``, ``rank`` and ``process_group`` (another DeepSpeed
            than the supported range).
        ValueError: ``ACCEL_ZERO_POOL`` is set to neither ``0`` nor ``1``.
    """
    original = getattr(optimizer_class, "allreduce_bucket", None)
    if getattr(original, "accel_pooled", False):
        return
    expected = {"communication_data_type", "rank", "process_group"}
    if not callable(original) or not expected <= set(inspect.signature(original).parameters):
        raise TypeError(
            f"{optimizer_class.__qualname__}.allreduce_bucket must take "
            f"communication_data_type, rank and process_group (DeepSpeed 0.19's), got "
            f"{original!r}"
        )
    zero_pool_enabled()  # a bad value is an error now, not in the middle of a step
    signature = inspect.signature(original)
    # What DeepSpeed binds to self.flatten (torch's, private and untyped).
    torch_utils = importlib.import_module("torch._utils")
    plain_flatten: Flatten = torch_utils._flatten_dense_tensors
    module = sys.modules.get(optimizer_class.__module__)

    def reduced_dtype(self: Any, asked: torch.dtype) -> torch.dtype:
        # As allreduce_bucket decides it: fp32 under its correctness test or with sequence
        # parallelism, else what the caller asked for.
        forced = getattr(module, "pg_correctness_test", False)
        return torch.float32 if forced or self.sequence_parallel_size > 1 else asked

    @functools.wraps(original)
    def allreduce_bucket(self: Any, *args: Any, **kwargs: Any) -> Any:
        flatten: object = getattr(self, "flatten", None)
        bound = signature.bind(self, *args, **kwargs).arguments
        if bound.get("rank") is not None or not zero_pool_enabled():  # a reduce runs on gloo
            COUNTS.plain += 1
            return original(self, *args, **kwargs)
        if not isinstance(flatten, _PoolingFlatten):
            if flatten is not plain_flatten:  # ZenFlow's, or one set by someone else
                COUNTS.plain += 1
                return original(self, *args, **kwargs)
            self.flatten = _PoolingFlatten(plain_flatten)
        group = bound.get("process_group")
        group = self.dp_process_group if group is None else group
        outer = getattr(_armed, "call", None), getattr(_armed, "pooled", False)
        _armed.call = (group, reduced_dtype(self, bound["communication_data_type"]))
        _armed.pooled = False
        try:
            return original(self, *args, **kwargs)
        finally:
            if _armed.pooled:
                COUNTS.pooled += 1
            else:
                COUNTS.plain += 1
            _armed.call, _armed.pooled = outer

    allreduce_bucket.accel_pooled = True  # type: ignore[attr-defined]
    optimizer_class.allreduce_bucket = allreduce_bucket  # type: ignore[attr-defined]
