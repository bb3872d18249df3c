"""Tensor placement checks by torch device type."""

from __future__ import annotations

from typing import ClassVar

import torch

from accel._checks import check_tensor


class TensorPlacementMixin:
    """``on_accelerator`` for backends that set ``device_type``."""

    device_type: ClassVar[str]

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lives on a device of type ``device_type``."""
        return check_tensor(tensor).device.type == self.device_type
