"""Host buffers that O_DIRECT accepts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch

from accel.io._engine import ALIGNMENT


def aligned_empty(
    shape: int | Sequence[int],
    dtype: torch.dtype = torch.float32,
    *,
    alignment: int = ALIGNMENT,
    pin_memory: bool = False,
) -> torch.Tensor:
    """An uninitialised CPU tensor whose data starts on an ``alignment``-byte boundary.

    Args:
        shape: The tensor's size, as an ``int`` or a sequence of them.
        dtype: The element type.
        alignment: A power of two, a multiple of ``dtype``'s size.
        pin_memory: Page-lock the buffer through the selected accelerator
            (``get_accelerator().pin_memory``), so copies to and from the device are fast;
            on devices without pinned memory (the CPU) it is ordinary memory.

    Returns:
        The tensor.

    Raises:
        TypeError: ``dtype`` is not a ``torch.dtype``.
        ValueError: ``alignment`` is not a power of two or not a multiple of ``dtype``'s
            size, or ``shape`` holds something other than non-negative ints.
    """
    checked = cast(object, alignment)  # callers without a type checker pass anything
    if (
        isinstance(checked, bool)
        or not isinstance(checked, int)
        or alignment < 1
        or (alignment & (alignment - 1))
    ):
        raise ValueError(f"alignment must be a power of two, got {alignment!r}")
    if not isinstance(cast(object, dtype), torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    if not isinstance(cast(object, pin_memory), bool):
        raise TypeError(f"pin_memory must be True or False, got {pin_memory!r}")
    given = cast(object, shape)
    if isinstance(given, (str, bytes)) or not isinstance(given, (int, Sequence)):
        raise ValueError(f"shape must be an int or a sequence of them, got {shape!r}")
    dims: tuple[object, ...] = (
        (given,) if isinstance(given, int) else tuple(cast("Sequence[object]", given))
    )
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in dims):
        raise ValueError(f"shape must be non-negative integers, got {shape!r}")
    sizes = cast(tuple[int, ...], dims)
    numel = 1
    for d in sizes:
        numel *= d
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if alignment % itemsize:
        raise ValueError(f"alignment {alignment} is not a multiple of {dtype}'s {itemsize} bytes")
    raw = torch.empty(numel * itemsize + alignment, dtype=torch.uint8)
    if pin_memory:
        from accel import get_accelerator

        raw = get_accelerator().pin_memory(raw)
    skip = -raw.data_ptr() % alignment
    return raw[skip : skip + numel * itemsize].view(dtype).view(sizes)
