"""DTypeAPI implementations: the dtype list derived from the answers, and torch probes."""

from __future__ import annotations

import functools
from typing import ClassVar

import torch
from typing_extensions import Protocol

from accel._device_module import device_module


class _DTypeAnswers(Protocol):
    def is_bf16_supported(self) -> bool: ...
    def is_fp16_supported(self) -> bool: ...


class DTypeListMixin:
    """Keeps ``supported_dtypes()`` consistent with ``is_bf16/fp16_supported()`` by construction."""

    def supported_dtypes(self: _DTypeAnswers) -> list[torch.dtype]:
        """``float32``, then ``bfloat16`` and ``float16`` where supported."""
        dtypes = [torch.float32]
        if self.is_bf16_supported():
            dtypes.append(torch.bfloat16)
        if self.is_fp16_supported():
            dtypes.append(torch.float16)
        return dtypes


@functools.cache
def matmul_runs(device_type: str, dtype: torch.dtype) -> bool:
    """Whether a small matmul in ``dtype`` gives the right answer on ``device_type``.

    Cached per argument pair.

    Args:
        device_type: A torch device type, e.g. ``"cuda"``.
        dtype: The floating-point type to try.

    Returns:
        ``True`` when a 4x4 matmul gives the exact answer; ``False`` when it gives another
        or torch raises ``RuntimeError``, ``TypeError`` or ``NotImplementedError``.
    """
    try:
        a = torch.full((4, 4), 0.5, dtype=dtype, device=device_type)
        return bool(torch.equal((a @ a).float().cpu(), torch.ones(4, 4)))
    except (RuntimeError, TypeError, NotImplementedError):
        return False


@functools.cache
def triton_runs_on(device_type: str) -> bool:
    """Whether Triton is installed and torch's inductor accepts it for ``device_type``.

    Args:
        device_type: A torch device type, e.g. ``"cuda"``.

    Returns:
        ``True`` when ``torch.utils._triton.has_triton()`` is and ``device_type`` is
        ``"cuda"`` or ``"xpu"``.
    """
    try:
        from torch.utils._triton import has_triton
    except ImportError:
        return False
    if not has_triton():
        return False
    return device_type in ("cuda", "xpu")


class TorchDTypeMixin:
    """bf16 from ``torch.<type>.is_bf16_supported()`` when it exists; fp16 by probe."""

    device_type: ClassVar[str]

    def is_bf16_supported(self) -> bool:
        """Whether the device computes in bfloat16."""
        native = getattr(device_module(self.device_type), "is_bf16_supported", None)
        if callable(native):
            return bool(native())
        return matmul_runs(self.device_type, torch.bfloat16)

    def is_fp16_supported(self) -> bool:
        """Whether a float16 matmul runs correctly on the device."""
        return matmul_runs(self.device_type, torch.float16)

    def is_triton_supported(self) -> bool:
        """Whether Triton kernels can run on the device."""
        return triton_runs_on(self.device_type)
