"""Page-locked host buffers, one registry per process.

:func:`new_locked_tensor` returns a page-aligned 1-D CPU tensor locked in RAM with
``mlock(2)``, so the kernel never swaps it out, as DeepSpeed's manager allocates it (a
device runtime may register it for fast copies afterwards, as DeepSpeed's
``NativePinnedMemory`` does with ``register_host_memory``). The registry keeps each buffer
until :func:`free_locked` (by the address it started at) and answers :func:`is_locked` for
any tensor lying wholly inside one, so a slice of a locked buffer counts as locked.

This is the manager DeepSpeed 0.19 keeps once per process (``deepspeed_pin_tensor_t``):
its ``pin_memory`` op and every ``aio_handle`` allocate, free and recognise buffers through
it, so the DeepSpeed integration serves both from here.

Where ``mlock`` is refused (an ``RLIMIT_MEMLOCK`` below the request and no
``CAP_IPC_LOCK``), the buffer stays in ordinary memory, correct but swappable, and a
WARNING says so once per process; :func:`is_locked` still counts it, as the buffers of
this registry are the ones callers asked to treat as pinned.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import resource
import threading
from dataclasses import dataclass

import torch

from accel._validate import check_tensor
from accel.io._buffers import aligned_empty

logger = logging.getLogger("accel")

PAGE_SIZE = mmap.PAGESIZE
"""The alignment of every locked buffer."""


@dataclass(frozen=True)
class _Region:
    memory: torch.Tensor  # keeps the bytes; never the tensor handed to the caller
    end: int
    mlocked: bool


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_regions: dict[int, _Region] = {}
_lock = threading.Lock()
_warned = False


def _torch_pinned(tensor: torch.Tensor) -> bool:
    try:
        return bool(tensor.is_pinned())
    except RuntimeError:  # builds without pinned memory may raise
        return False


def _mlock(address: int, size: int) -> bool:
    global _warned
    if _libc.mlock(address, size) == 0:
        return True
    error = ctypes.get_errno()
    if not _warned:
        _warned = True
        soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        limit = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} bytes"
        logger.warning(
            "accel.io.locked: mlock of %d bytes refused (%s; RLIMIT_MEMLOCK is %s): locked "
            "buffers stay in ordinary, swappable memory in this process. Raise the limit "
            "(ulimit -l) or grant CAP_IPC_LOCK to lock them.",
            size, os.strerror(error), limit,
        )  # fmt: skip
    return False


def new_locked_tensor(num_elem: int, dtype: torch.dtype) -> torch.Tensor:
    """A page-aligned, page-locked 1-D CPU tensor of ``num_elem`` elements, uninitialised,
    kept by the registry until :func:`free_locked`.

    Args:
        num_elem: The number of elements, ``>= 0``.
        dtype: The element type.

    Returns:
        The tensor; its ``data_ptr()`` is the address :func:`free_locked` takes. Where
        ``mlock`` is refused it is still registered, in ordinary memory.

    Raises:
        ValueError: ``num_elem`` is not an ``int >= 0``.
        TypeError: ``dtype`` is not a ``torch.dtype``.
    """
    if not isinstance(num_elem, int) or isinstance(num_elem, bool) or num_elem < 0:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"num_elem must be an int >= 0, got {num_elem!r}")
    memory = aligned_empty(num_elem, dtype, alignment=PAGE_SIZE)
    # The caller gets a tensor of its own over the memory, not a view (views of it then
    # keep *it* alive, as they keep a DeepSpeed buffer alive), so it can be
    # garbage-collected while the registry, holding ``memory``, keeps the bytes valid
    # until free_locked. DeepSpeed frees a buffer when a finalizer on that tensor runs.
    offset = memory.storage_offset()
    tensor = torch.empty(0, dtype=dtype).set_(memory.untyped_storage(), offset, (num_elem,), (1,))
    start, size = tensor.data_ptr(), tensor.numel() * tensor.element_size()
    mlocked = size > 0 and _mlock(start, size)
    with _lock:
        _regions[start] = _Region(memory, start + size, mlocked)
    return tensor


def free_locked(address: int) -> bool:
    """Release the buffer that starts at ``address``: True if the registry had one there
    (its memory returns once the caller's last reference goes), False otherwise.

    Args:
        address: The ``data_ptr()`` of a tensor :func:`new_locked_tensor` returned.

    Returns:
        ``True`` when a buffer started there (it is unlocked and forgotten), else ``False``.
    """
    with _lock:
        region = _regions.pop(address, None)
    if region is None:
        return False
    if region.mlocked:
        _libc.munlock(address, region.end - address)
    return True


def is_locked(tensor: torch.Tensor) -> bool:
    """Whether every byte of ``tensor`` lies inside one buffer of the registry.

    Args:
        tensor: Any tensor.

    Returns:
        ``True`` for a CPU tensor inside one buffer (a slice of one counts), else ``False``.
    """
    if not check_tensor(tensor).is_cpu:
        return False
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    with _lock:
        return any(low <= start and end <= region.end for low, region in _regions.items())


def is_pinned_or_locked(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is torch-pinned or lies inside one buffer of the registry.

    Args:
        tensor: Any tensor.

    Returns:
        ``True`` when ``tensor.is_pinned()`` or :func:`is_locked` says so.
    """
    return _torch_pinned(check_tensor(tensor)) or is_locked(tensor)


def locked_bytes() -> int:
    """Bytes the registry holds."""
    with _lock:
        return sum(region.end - start for start, region in _regions.items())
