"""TensorAPI implementations: placement by device type, and host staging buffers.

``HostStagingMixin`` is for a device that computes in host memory (nothing to pin);
``PinnedHostMemoryMixin`` for one that copies from host memory by DMA.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from accel._validate import check_positive, check_tensor
from accel.protocols._contract import implements
from accel.protocols.memory import HostCacheAPI
from accel.protocols.tensor import TensorAPI


@implements(TensorAPI)
class TensorPlacementMixin:
    """``on_accelerator`` for backends that set ``device_type``."""

    device_type: ClassVar[str]

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        if isinstance(tensor, torch.Tensor):  # pyright: ignore[reportUnnecessaryIsInstance]
            return tensor.device.type == self.device_type
        return check_tensor(tensor).device.type == self.device_type  # raises, naming it


@implements(TensorAPI)
class HostStagingMixin:
    """``pin_memory``/``is_pinned`` when the device reads host memory directly.

    Page-locking exists to let a separate device DMA from host memory. When the device is
    the host, every CPU tensor is already as ready as it can be: ``pin_memory`` returns the
    tensor itself (no copy) and ``is_pinned`` is True for every CPU tensor, so the
    ``is_pinned(pin_memory(t))`` contract holds. (``Tensor.pin_memory()`` itself raises on
    a build of torch without a GPU.)
    """

    def pin_memory(self, tensor: torch.Tensor, align_bytes: int = 1) -> torch.Tensor:
        """``tensor`` itself, not copied (``align_bytes`` is checked, then ignored): host memory
        needs no staging for a host device."""
        check_tensor(tensor)
        check_positive(align_bytes, "align_bytes")
        if tensor.device.type != "cpu":
            raise ValueError(f"pin_memory() needs a CPU tensor, got one on {tensor.device}")
        return tensor

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """True for every CPU tensor (see the class docstring)."""
        return check_tensor(tensor).device.type == "cpu"


@implements(TensorAPI)
class PinnedHostMemoryMixin:
    """``pin_memory``/``is_pinned`` through torch's page-locked host allocator."""

    def pin_memory(self, tensor: torch.Tensor, align_bytes: int = 1) -> torch.Tensor:
        """``tensor.pin_memory()``, or ``tensor`` itself when already pinned. torch's pinned
        allocator aligns every block to at least 512 bytes, which covers the ``align_bytes``
        DeepSpeed callers ask for (1 by default)."""
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
        """``tensor.is_pinned()``."""
        return bool(check_tensor(tensor).is_pinned())


@implements(HostCacheAPI)
class TorchHostCacheMixin:
    """``empty_host_cache`` through torch's pinned host allocator of its accelerator."""

    device_type: ClassVar[str]

    def empty_host_cache(self) -> None:
        """``torch.accelerator.empty_host_cache()``; ``RuntimeError`` where this device type is not
        torch's accelerator in this process (torch keeps one pinned host cache, that of its
        accelerator)."""
        current = torch.accelerator.current_accelerator()
        if current is None or current.type != self.device_type:
            raise RuntimeError(
                f"torch's accelerator here is {current}, not {self.device_type}: its pinned "
                "host cache is not this device's"
            )
        torch.accelerator.empty_host_cache()
