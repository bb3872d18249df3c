"""Page-locked host buffers for devices that copy from host memory by DMA."""

from __future__ import annotations

import torch

from accel._checks import check_positive, check_tensor


class PinnedHostMemoryMixin:
    """``pin_memory``/``is_pinned`` through torch's page-locked host allocator."""

    def pin_memory(self, tensor: torch.Tensor, align_bytes: int = 1) -> torch.Tensor:
        """A page-locked copy of a CPU tensor (the tensor itself if already pinned).

        torch's pinned allocator aligns every block to at least 512 bytes, which covers the
        ``align_bytes`` DeepSpeed callers ask for (1 by default).
        """
        check_tensor(tensor)
        check_positive(align_bytes, "align_bytes")
        if tensor.device.type != "cpu":
            raise ValueError(f"pin_memory() needs a CPU tensor, got one on {tensor.device}")
        return tensor if tensor.is_pinned() else tensor.pin_memory()

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is in page-locked host memory."""
        return bool(check_tensor(tensor).is_pinned())
