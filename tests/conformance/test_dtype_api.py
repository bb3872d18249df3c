"""DTypeAPI: bool answers, and supported_dtypes agrees with them."""

from __future__ import annotations

import torch

from accel.protocols import Accelerator


def test_answers_are_bools(accelerator: Accelerator) -> None:
    for answer in (
        accelerator.is_bf16_supported(),
        accelerator.is_fp16_supported(),
        accelerator.is_triton_supported(),
    ):
        assert isinstance(answer, bool)


def test_supported_dtypes_agrees_with_the_answers(accelerator: Accelerator) -> None:
    dtypes = accelerator.supported_dtypes()
    assert torch.float32 in dtypes
    assert (torch.bfloat16 in dtypes) == accelerator.is_bf16_supported()
    assert (torch.float16 in dtypes) == accelerator.is_fp16_supported()
    assert len(set(dtypes)) == len(dtypes)


def test_every_supported_dtype_computes(accelerator: Accelerator) -> None:
    device = accelerator.current_device_name()
    for dtype in accelerator.supported_dtypes():
        a = torch.full((4, 4), 0.5, dtype=dtype, device=device)
        assert torch.equal((a @ a).float().cpu(), torch.full((4, 4), 1.0))
