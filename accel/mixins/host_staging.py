"""Staging buffers for an accelerator whose memory *is* host memory."""

from __future__ import annotations

import torch

from accel._checks import check_positive, check_tensor


class HostStagingMixin:
    """``pin_memory``/``is_pinned`` when the device reads host memory directly.

    Page-locking exists to let a separate device DMA from host memory. When the device is
    the host, every CPU tensor is already as ready as it can be: ``pin_memory`` returns the
    tensor itself (no copy) and ``is_pinned`` is True for every CPU tensor, so the
    ``is_pinned(pin_memory(t))`` contract holds. (``Tensor.pin_memory()`` itself raises on
    a build of torch without a GPU.)
    """

    def pin_memory(self, tensor: torch.Tensor, align_bytes: int = 1) -> torch.Tensor:
        """``tensor`` itself; raises ``ValueError`` for a tensor that is not on the host."""
        check_tensor(tensor)
        check_positive(align_bytes, "align_bytes")
        if tensor.device.type != "cpu":
            raise ValueError(f"pin_memory() needs a CPU tensor, got one on {tensor.device}")
        return tensor

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """True for every CPU tensor (see the class docstring)."""
        return check_tensor(tensor).device.type == "cpu"
