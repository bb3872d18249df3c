"""``supported_dtypes()`` derived from the backend's ``is_*_supported`` answers."""

from __future__ import annotations

import torch
from typing_extensions import Protocol


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
