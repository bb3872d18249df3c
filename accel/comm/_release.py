"""Synchronous torch.distributed calls that return only once gloo has let go of the tensors.

torch's gloo backend runs a collective on a worker thread. ``wait()`` returns when the
result is ready, but the worker drops its references to the tensors a moment later. A
Python-visible tensor then needs the GIL to be released (torch hands the last C++
reference back to the Python object), and if the interpreter has begun to finalise by then
(the collective was the program's last act), Python 3.11 ends the worker with
``pthread_exit`` inside a ``noexcept`` destructor: ``std::terminate``, "terminate called
without an active exception", SIGABRT after the program's work is done.

Waiting for the references to drop, as :func:`run_released` does, prevents it; the
measurements are in docs/deepspeed.md ("Exit-time aborts") and
``tests/integrations/deepspeed/scripts/exit_abort_repro.py`` reproduces the abort.
Every synchronous torch.distributed call in accel goes through here.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Generator, Sequence

import torch
import torch.distributed as dist

# The gloo worker lets go within microseconds; a backend that keeps the tensors longer
# (by design, or a worker starved of CPU for this long) is not waited for any further.
_RELEASE_WAIT_S = 1.0

# Calls that returned at that limit with a tensor still held: each cost the whole wait.
gave_up = 0
_gave_up_lock = threading.Lock()  # calls run on several threads (queued work, callers)

# group -> whether gloo's threads run its CPU collectives. Weak: a destroyed group is not
# kept alive (with its gloo context and, in accel.comm, its shared segment).
_gloo_cpu: weakref.WeakKeyDictionary[dist.ProcessGroup, bool] = weakref.WeakKeyDictionary()


def _runs_on_gloo(group: dist.ProcessGroup | None) -> bool:
    """Whether CPU collectives on ``group`` run on gloo's worker threads ("gloo",
    "cpu:gloo,cuda:nccl", or accel's backend, which delegates to gloo)."""
    key = group if group is not None else dist.group.WORLD
    known = _gloo_cpu.get(key) if key is not None else None
    if known is None:
        backend = str(dist.get_backend(group))
        known = backend in ("gloo", "accel") or "cpu:gloo" in backend
        if key is not None:
            _gloo_cpu[key] = known
    return known


def _use_count(tensor: torch.Tensor) -> int:
    """C++ references to the tensor (torch's stubs lack ``Tensor._use_count``)."""
    count: Callable[[], int] | None = getattr(tensor, "_use_count", None)
    return count() if count is not None else 0


@contextlib.contextmanager
def released(tensors: Sequence[torch.Tensor]) -> Generator[None]:
    """Around a synchronous gloo call on ``tensors``: return once gloo's worker holds none
    of their CPU ones (at most ``_RELEASE_WAIT_S``)."""
    watched = [t for t in tensors if t.is_cpu]
    counts = [_use_count(t) for t in watched]
    yield
    global gave_up
    deadline = time.monotonic() + _RELEASE_WAIT_S
    for tensor, count in zip(watched, counts, strict=True):
        while _use_count(tensor) > count:
            if time.monotonic() >= deadline:
                with _gave_up_lock:
                    gave_up += 1
                return
            time.sleep(0)  # hands over the GIL, which the worker needs to let go


def run_released(
    collective: Callable[..., object],
    tensors: Sequence[torch.Tensor],
    group: dist.ProcessGroup | None,
    *args: object,
    **kwargs: object,
) -> None:
    """Call ``collective(*args, group=group, **kwargs)`` (a synchronous torch.distributed
    call on ``tensors``) and return once gloo's worker holds none of ``tensors``.

    Only CPU tensors on gloo-run groups are waited for: other backends release their
    tensors on their own schedule (NCCL's watchdog, for one) and are not waited for.
    """
    with released(tensors if _runs_on_gloo(group) else ()):
        collective(*args, group=group, **kwargs)
