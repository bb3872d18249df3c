"""DeepSpeed's shared-memory comm module over :mod:`accel.comm`.

DeepSpeed's comm layer loads ``ShareMemCommBuilder``, calls ``initialize(world, rank)`` and
``vector_kernel_level()``, then reduces through ``torch.ops.deepspeed.inference_all_reduce_``.
This module registers those two ops (``inference_all_reduce`` and its in-place form, with
DeepSpeed's schemas) backed by accel's all-reduce: an anonymous segment (nothing left in
/dev/shm), set up on the first call without ``LOCAL_SIZE``, errors instead of hangs when a
peer dies, and ``torch.distributed`` for ranks on other nodes or dtypes the segment does
not take. :func:`direct_inference_all_reduce` lets ``deepspeed.comm.inference_all_reduce``
skip the dispatcher's round trip into that Python kernel.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

import torch
from typing_extensions import override

from accel import comm
from accel.integrations.deepspeed.kernels import DeepSpeedModule

_ops_lock = threading.Lock()
_library: object = None  # kept alive: torch drops a Library's ops when it is collected
_ops_owner: str | None = None  # "accel" or "deepspeed": who defined torch.ops.deepspeed.*


# torch.library.Library is untyped; its calls are checked by the tests that run the ops.
_LIBRARY: Any = torch.library.Library


def _all_reduce_in_place(tensor: torch.Tensor) -> torch.Tensor:
    return comm.all_reduce_(tensor)


def _all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    return comm.all_reduce_(tensor.clone())


def _same(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def register_ops() -> str:
    """Define ``torch.ops.deepspeed.inference_all_reduce(_)`` backed by accel, once.

    Returns who owns the ops: ``"accel"``, or ``"deepspeed"`` when DeepSpeed's own
    compiled module defined them earlier in this process (its definitions stay: torch
    allows one definition per op).
    """
    global _library, _ops_owner
    with _ops_lock:
        if _ops_owner is not None:
            return _ops_owner
        if hasattr(torch.ops.deepspeed, "inference_all_reduce_"):
            _ops_owner = "deepspeed"
            return _ops_owner
        library = _LIBRARY("deepspeed", "FRAGMENT")
        library.define("inference_all_reduce(Tensor self) -> Tensor")
        library.define("inference_all_reduce_(Tensor(a!) self) -> Tensor(a!)")
        library.impl("inference_all_reduce", _all_reduce, "CPU")
        library.impl("inference_all_reduce_", _all_reduce_in_place, "CPU")
        library.impl("inference_all_reduce", torch.empty_like, "Meta")
        library.impl("inference_all_reduce_", _same, "Meta")
        _library, _ops_owner = library, "accel"
        # Drop the Python kernels while the interpreter is whole: left to the dispatcher's
        # static destruction, they would be released after Python has finalised.
        atexit.register(library._destroy)
        return _ops_owner


def direct_inference_all_reduce(backend: type) -> None:
    """Make ``backend.inference_all_reduce`` (DeepSpeed's ``TorchBackend``, behind
    ``deepspeed.comm.inference_all_reduce``) call accel's all-reduce itself where it would
    call ``torch.ops.deepspeed.inference_all_reduce_`` defined by accel: the same function,
    without torch's dispatcher calling back into Python (~1.4 us a call, a quarter of a
    4 KiB all-reduce). Code being compiled by ``torch.compile`` still calls the op, and
    everything else (one rank, DeepSpeed's op, a module without the kernel level DeepSpeed
    requires) takes DeepSpeed's method unchanged. Idempotent.

    Args:
        backend: The class whose ``inference_all_reduce`` method is replaced, in place.

    Raises:
        AttributeError: ``backend`` has no ``inference_all_reduce``.
    """
    # DeepSpeed is untyped: its method is Any to the checkers.
    original: Any = getattr(backend, "inference_all_reduce")  # noqa: B009
    if getattr(original, "__accel_direct__", False):
        return

    def inference_all_reduce(self: Any, tensor: torch.Tensor, op: Any, group: Any = None) -> Any:
        if _ops_owner != "accel" or torch.compiler.is_compiling():
            return original(self, tensor, op, group)
        # DeepSpeed 0.19's conditions for calling the op, in its order.
        if torch.distributed.get_world_size(group=group) <= 1:
            return tensor
        required_level = 1 if tensor.dtype == torch.float32 else 2
        if getattr(self, "shm_vector_kernel_level", 0) < required_level:
            return original(self, tensor, op, group)
        return comm.all_reduce_(tensor)

    setattr(inference_all_reduce, "__accel_direct__", True)  # noqa: B010
    setattr(inference_all_reduce, "__wrapped__", original)  # noqa: B010
    setattr(backend, "inference_all_reduce", inference_all_reduce)  # noqa: B010


def owner() -> str | None:
    """Who defined ``torch.ops.deepspeed.inference_all_reduce(_)`` here: ``"accel"``,
    ``"deepspeed"``, or ``None`` before :func:`register_ops` ran."""
    return _ops_owner


class ShmCommKernels(DeepSpeedModule):
    """DeepSpeed's ``deepspeed_shm_comm`` module: ``initialize``, ``vector_kernel_level``.

    Making one defines ``torch.ops.deepspeed.inference_all_reduce(_)`` (:func:`register_ops`):
    DeepSpeed's comm layer calls those ops once its builder has loaded the module.
    """

    @override
    def _set_up(self) -> None:
        super()._set_up()
        register_ops()

    def initialize(self, size: int, rank: int) -> None:
        """Check the job's shape (``ValueError`` unless ``size`` is an ``int`` >= 1 and
        ``rank`` one in ``[0, size)``). The segment itself is set up by the first all-reduce
        (a collective every rank makes), so nothing here depends on ``LOCAL_SIZE``."""
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"initialize: size must be an integer >= 1, got {size!r}")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < size:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"initialize: rank must be an integer in [0, {size}), got {rank!r}")

    def vector_kernel_level(self) -> int:
        """2: every dtype may use the op. DeepSpeed's level guards kernels that fault
        without AVX-512; accel's pick their instruction set at load time and never fault."""
        return 2
