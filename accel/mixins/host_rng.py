"""RNG of the host: every CPU device index shares torch's default CPU generator."""

from __future__ import annotations

import torch

from accel._checks import check_index
from accel.mixins.generator_rng import GeneratorRNGMixin


class HostRNGMixin(GeneratorRNGMixin):
    """The host's single ``torch.default_generator`` behind every device index."""

    def default_generator(self, device_index: int) -> torch.Generator:
        """``torch.default_generator`` (validated index; the host has one generator)."""
        check_index(device_index)
        return torch.default_generator
