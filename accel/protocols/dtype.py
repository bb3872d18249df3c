"""DTypeAPI: which floating-point types the device computes in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol

if TYPE_CHECKING:
    import torch


@fast_protocol
@runtime_checkable
class DTypeAPI(Protocol):
    """Data-type support. Every answer is a ``bool`` (never ``None``).

    ``supported_dtypes()`` lists ``torch.float32`` plus ``torch.bfloat16`` and
    ``torch.float16`` exactly when :meth:`is_bf16_supported` / :meth:`is_fp16_supported`
    say so.
    """

    def is_bf16_supported(self) -> bool:
        """Whether bfloat16 compute is supported natively.

        Returns:
            ``True`` or ``False``, never ``None``.
        """
        ...

    def is_fp16_supported(self) -> bool:
        """Whether float16 compute is supported natively.

        Returns:
            ``True`` or ``False``, never ``None``.
        """
        ...

    def supported_dtypes(self) -> list[torch.dtype]:
        """The floating-point types to train or infer in on this device.

        Returns:
            ``torch.float32``, then ``torch.bfloat16`` and ``torch.float16`` where supported.
        """
        ...

    def is_triton_supported(self) -> bool:
        """Whether Triton kernels can run on this device.

        Returns:
            ``True`` or ``False``, never ``None``.
        """
        ...
