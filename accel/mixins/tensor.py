"""TensorAPI implementations: placement by device type, and host staging buffers.

``HostStagingMixin`` is for a device that computes in host memory (nothing to pin);
``PinnedHostMemoryMixin`` for one that copies from host memory by DMA.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from accel._validate import check_positive, check_tensor


class TensorPlacementMixin:
    """``on_accelerator`` for backends that set ``device_type``."""

    device_type: ClassVar[str]

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lives on a device of type ``device_type``.

        Args:
            tensor: Any tensor.

        Returns:
            ``True`` when ``tensor.device.type`` is ``device_type``.

        Raises:
            TypeError: ``tensor`` is not a ``torch.Tensor``.
        """
        if isinstance(tensor, torch.Tensor):  # pyright: ignore[reportUnnecessaryIsInstance]
            return tensor.device.type == self.device_type
        return check_tensor(tensor).device.type == self.device_type  # raises, naming it


class HostStagingMixin:
    """``pin_memory``/``is_pinned`` when the device reads host memory directly.

    Page-locking exists to let a separate device DMA from host memory. When the device is
    the host, every CPU tensor is already as ready as it can be: ``pin_memory`` returns the
    tensor itself (no copy) and ``is_pinned`` is True for every CPU tensor, so the
    ``is_pinned(pin_memory(t))`` contract holds. (``Tensor.pin_memory()`` itself raises on
    a build of torch without a GPU.)
    """

    def pin_memory(self, tensor: torch.Tensor, align_bytes: int = 1) -> torch.Tensor:
        """``tensor`` itself; raises ``ValueError`` for a tensor that is not on the host.

        Args:
            tensor: A CPU tensor.
            align_bytes: Checked (at least 1), then ignored: ``tensor`` is not moved.

        Returns:
            ``tensor`` (no copy: host memory needs no staging for a host device).

        Raises:
            TypeError: ``tensor`` is not a ``torch.Tensor`` or ``align_bytes`` not an ``int``.
            ValueError: ``tensor`` is not on the CPU, or ``align_bytes`` is below 1.
        """
        check_tensor(tensor)
        check_positive(align_bytes, "align_bytes")
        if tensor.device.type != "cpu":
            raise ValueError(f"pin_memory() needs a CPU tensor, got one on {tensor.device}")
        return tensor

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """True for every CPU tensor (see the class docstring).

        Args:
            tensor: Any tensor.

        Returns:
            ``True`` when ``tensor`` is on the CPU.

        Raises:
            TypeError: ``tensor`` is not a ``torch.Tensor``.
        """
        return check_tensor(tensor).device.type == "cpu"


class PinnedHostMemoryMixin:
    """``pin_memory``/``is_pinned`` through torch's page-locked host allocator."""

    def pin_memory(self, tensor: torch.Tensor, align_bytes: int = 1) -> torch.Tensor:
        """A page-locked copy of a CPU tensor (the tensor itself if already pinned).

        torch's pinned allocator aligns every block to at least 512 bytes, which covers the
        ``align_bytes`` DeepSpeed callers ask for (1 by default).

        Args:
            tensor: A CPU tensor.
            align_bytes: The alignment the staged memory needs, at least 1.

        Returns:
            ``tensor`` when it is already pinned, else ``tensor.pin_memory()``.

        Raises:
            TypeError: ``tensor`` is not a ``torch.Tensor`` or ``align_bytes`` not an ``int``.
            ValueError: ``tensor`` is not on the CPU, or ``align_bytes`` is below 1.
            RuntimeError: The device's torch runtime provides no page-locked host memory.
        """
        check_tensor(tensor)
        check_positive(align_bytes, "align_bytes")
        if tensor.device.type != "cpu":
            raise ValueError(f"pin_memory() needs a CPU tensor, got one on {tensor.device}")
        if tensor.is_pinned():
            return tensor
        try:
            return tensor.pin_memory()
        except NotImplementedError as error:
            # An out-of-tree device whose runtime registered no pinned-memory allocator:
            # say so in accel's words rather than let torch's hook error through.
            raise RuntimeError(
                "pin_memory(): this device's torch runtime provides no page-locked host "
                f"memory ({error})"
            ) from error

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is in page-locked host memory.

        Args:
            tensor: Any tensor.

        Returns:
            ``tensor.is_pinned()``.

        Raises:
            TypeError: ``tensor`` is not a ``torch.Tensor``.
        """
        return bool(check_tensor(tensor).is_pinned())


class TorchHostCacheMixin:
    """``empty_host_cache`` through torch's pinned host allocator of its accelerator."""

    device_type: ClassVar[str]

    def empty_host_cache(self) -> None:
        """``torch.accelerator.empty_host_cache()``: torch keeps one pinned host cache, that
        of its accelerator.

        Raises:
            RuntimeError: This device type is not torch's accelerator in this process.
        """
        current = torch.accelerator.current_accelerator()
        if current is None or current.type != self.device_type:
            raise RuntimeError(
                f"torch's accelerator here is {current}, not {self.device_type}: its pinned "
                "host cache is not this device's"
            )
        torch.accelerator.empty_host_cache()
