"""torch dtypes -> the element-type codes of the native modules.

The codes are defined once, in csrc/common/dtypes.h; each extension exports them as its
``DTYPES`` attribute (``{"float32": 0, ...}``), and this is the only place Python reads
them.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

import torch


def dtype_codes(native: ModuleType) -> dict[torch.dtype, int]:
    """``{torch.float32: 0, ...}`` as the extension ``native`` defines them."""
    table: dict[str, int] = native.DTYPES
    return {getattr(torch, name): int(code) for name, code in table.items()}


def dtype_list(dtypes: Iterable[torch.dtype]) -> str:
    """``"float32, bfloat16 or float16"`` for error messages."""
    names = [str(d).removeprefix("torch.") for d in dtypes]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
