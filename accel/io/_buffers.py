"""Host buffers that O_DIRECT accepts."""

from __future__ import annotations

from collections.abc import Sequence

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
    if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"alignment must be a power of two, got {alignment!r}")
    if not isinstance(dtype, torch.dtype):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(not isinstance(d, int) or d < 0 for d in dims):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"shape must be non-negative integers, got {shape!r}")
    numel = 1
    for d in dims:
        numel *= d
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if alignment % itemsize:
        raise ValueError(f"alignment {alignment} is not a multiple of {dtype}'s {itemsize} bytes")
    raw = torch.empty(numel * itemsize + alignment, dtype=torch.uint8)
    if pin_memory:
        from accel import get_accelerator

        raw = get_accelerator().pin_memory(raw)
    skip = -raw.data_ptr() % alignment
    return raw[skip : skip + numel * itemsize].view(dtype).view(dims)
