"""DeepSpeed's ``pin_memory`` module (``PinMemoryBuilder``, its native pinned-memory
backend, ``DS_PIN_MEMORY_BACKEND=native``) over :mod:`accel.io.locked`.

``deepspeed.utils.pin_memory`` makes one ``PinMemoryBuilder().load().pin_handle()`` and
allocates, frees and recognises page-locked buffers through it; DeepSpeed's ``aio_handle``
shares the same process-wide manager, and so does accel's
(:mod:`accel.integrations.deepspeed.aio`). Nothing is compiled.
"""

from __future__ import annotations

import torch

from accel.integrations.deepspeed.kernels import DeepSpeedModule
from accel.io import locked


class pin_handle:
    """DeepSpeed's ``pin_handle``: page-locked CPU tensors from the process's manager."""

    def new_cpu_locked_tensor(self, num_elem: int, example_tensor: torch.Tensor) -> torch.Tensor:
        """A page-aligned, page-locked 1-D tensor of ``num_elem`` elements of
        ``example_tensor``'s dtype, kept until freed.

        Args:
            num_elem: The number of elements, >= 0.
            example_tensor: A tensor whose dtype the buffer takes.

        Returns:
            A new, uninitialised 1-D CPU tensor, held by the process's manager until
            :meth:`free_cpu_locked_tensor` or :meth:`free_cpu_locked_tensor_by_ptr`.

        Raises:
            ValueError: ``num_elem`` is not an ``int`` >= 0.
        """
        return locked.new_locked_tensor(num_elem, example_tensor.dtype)

    def free_cpu_locked_tensor(self, locked_tensor: torch.Tensor) -> bool:
        """Release the buffer ``locked_tensor`` starts: True if it was one, else False.

        Args:
            locked_tensor: A buffer from :meth:`new_cpu_locked_tensor` (any tensor is accepted).

        Returns:
            ``True`` if a buffer started at ``locked_tensor``'s first byte and is now released.
        """
        return locked.free_locked(locked_tensor.data_ptr())

    def free_cpu_locked_tensor_by_ptr(self, address: int) -> bool:
        """Release the buffer starting at ``address``: True if there was one, else False.

        Args:
            address: The buffer's ``data_ptr()``.

        Returns:
            ``True`` if a buffer started at ``address`` and is now released.

        Raises:
            TypeError: ``address`` is not an ``int`` (``bool`` excluded).
        """
        if not isinstance(address, int) or isinstance(address, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"address must be an int, got {type(address).__name__}")
        return locked.free_locked(address)

    def is_pinned(self, buffer: torch.Tensor) -> bool:
        """Whether ``buffer`` is torch-pinned or lies inside one of the manager's buffers.

        Args:
            buffer: Any tensor.

        Returns:
            ``True`` for a CPU tensor that is torch-pinned or lies inside a buffer from
            :meth:`new_cpu_locked_tensor`; ``False`` for every tensor off the CPU.
        """
        return buffer.is_cpu and locked.is_pinned_or_locked(buffer)


class PinMemoryKernels(DeepSpeedModule):
    """DeepSpeed's ``pin_memory`` module: the ``pin_handle`` class."""

    pin_handle = pin_handle
