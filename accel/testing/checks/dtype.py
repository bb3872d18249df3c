"""DTypeAPI: the dtype answers agree with each other."""

from __future__ import annotations

import torch

from accel.protocols import (
    Accelerator,
    DTypeAPI,
)
from accel.testing._framework import check


@check(DTypeAPI, "supported_dtypes/is_*_supported")
def dtype_answers_agree(acc: Accelerator) -> None:
    """The ``is_*_supported()`` answers are ``bool`` and agree with ``supported_dtypes()``, and
    every listed dtype computes a matmul right.
    """
    answers = (acc.is_bf16_supported(), acc.is_fp16_supported(), acc.is_triton_supported())
    assert all(isinstance(a, bool) for a in answers), (
        f"is_*_supported() must return bool, got {answers}"
    )
    dtypes = acc.supported_dtypes()
    assert torch.float32 in dtypes, "supported_dtypes() lacks float32"
    assert (torch.bfloat16 in dtypes) == acc.is_bf16_supported(), (
        "supported_dtypes() disagrees with is_bf16_supported()"
    )
    assert (torch.float16 in dtypes) == acc.is_fp16_supported(), (
        "supported_dtypes() disagrees with is_fp16_supported()"
    )
    for dtype in dtypes:
        a = torch.full((4, 4), 0.5, dtype=dtype, device=acc.current_device_name())
        assert torch.equal((a @ a).float().cpu(), torch.ones(4, 4)), f"a {dtype} matmul is wrong"
