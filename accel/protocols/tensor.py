"""TensorAPI: where a tensor lives and how host tensors are staged for the device."""

from __future__ import annotations

from typing import TYPE_CHECKING

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol

if TYPE_CHECKING:
    import torch


@fast_protocol
@runtime_checkable
class TensorAPI(Protocol):
    """Tensor placement queries and host staging buffers."""

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lives on a device of this accelerator's type.

        Args:
            tensor: Any tensor.

        Returns:
            ``True`` when its device type is this accelerator's.

        Raises:
            TypeError: ``tensor`` is not a ``torch.Tensor``.
        """
        ...

    def pin_memory(self, tensor: torch.Tensor, align_bytes: int = 1) -> torch.Tensor:
        """A host tensor with the same data, staged for fast asynchronous copies to the device.

        Args:
            tensor: A CPU tensor.
            align_bytes: The alignment the staged memory needs, at least 1.

        Returns:
            The staged tensor (``tensor`` itself when it already is).

        Raises:
            TypeError: ``tensor`` is not a ``torch.Tensor`` or ``align_bytes`` not an ``int``.
            ValueError: ``tensor`` is not on the CPU, or ``align_bytes`` is below 1.
            RuntimeError: The device's runtime provides no page-locked host memory.
        """
        ...

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is a host tensor staged as :meth:`pin_memory` would stage it.

        Args:
            tensor: Any tensor.

        Returns:
            ``True`` when it is.

        Raises:
            TypeError: ``tensor`` is not a ``torch.Tensor``.
        """
        ...
