"""Typed, validating front door to the native CPU optimizer kernels.

Every argument is checked here before any pointer reaches C++: tensors must be dense,
contiguous CPU tensors of supported dtypes, states fp32 and the same size as their
parameter, nothing may overlap, and hyper-parameters must be in range. Errors name the
argument, the offending index and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import cast

import torch

_DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_COPY_CODES = {torch.bfloat16: 1, torch.float16: 2}
NO_COPY = -1


def native() -> ModuleType:
    """The compiled kernels (``ImportError`` with the reason if this install has none)."""
    from accel.ops import _cpu_optim

    return _cpu_optim


def check_beta(value: object, name: str) -> float:
    """A beta in [0, 1)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return float(value)


def check_betas(betas: object) -> tuple[float, float]:
    """A pair of betas, each in [0, 1)."""
    if isinstance(betas, (tuple, list)):
        pair = cast("Sequence[object]", betas)
        if len(pair) == 2:
            return check_beta(pair[0], "betas[0]"), check_beta(pair[1], "betas[1]")
    raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")


def check_eps(eps: object) -> float:
    """An epsilon > 0."""
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0 or math.isinf(eps):
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    return float(eps)


def check_non_negative(value: object, name: str) -> float:
    """A finite number >= 0 (learning rate, weight decay, lr decay)."""
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class _Batch:
    params: list[int]
    grads: list[int]
    states: list[list[int]]
    copies: list[int]
    numels: list[int]
    param_dtypes: list[int]
    grad_dtypes: list[int]
    copy_dtypes: list[int]


def _dense_cpu(tensor: object, what: str) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.is_sparse or tensor.layout != torch.strided:
        raise ValueError(f"{what} must be a dense tensor, got layout {tensor.layout}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{what} must be on the CPU, got {tensor.device}")
    if not tensor.is_contiguous():
        raise ValueError(f"{what} must be contiguous (call .contiguous())")
    return tensor


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    start = tensor.data_ptr()
    return start, start + tensor.numel() * tensor.element_size()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a.numel() > 0 and b.numel() > 0 and a0 < b1 and b0 < a1


def _batch(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    states: dict[str, Sequence[torch.Tensor]],
    param_copies: Sequence[torch.Tensor | None] | None,
) -> _Batch:
    count = len(params)
    if len(grads) != count:
        raise ValueError(f"grads has {len(grads)} entries, expected one per parameter ({count})")
    for name, tensors in states.items():
        if len(tensors) != count:
            raise ValueError(f"{name} has {len(tensors)} entries, expected {count}")
    copies = list(param_copies) if param_copies is not None else [None] * count
    if len(copies) != count:
        raise ValueError(f"param_copies has {len(copies)} entries, expected {count}")
    batch = _Batch([], [], [[] for _ in states], [], [], [], [], [])
    for i, (param, grad, copy) in enumerate(zip(params, grads, copies, strict=True)):
        param = _dense_cpu(param, f"params[{i}]")
        if grad is None:
            raise ValueError(f"grads[{i}] is None: parameter {i} has no gradient")
        grad = _dense_cpu(grad, f"grads[{i}]")
        if param.dtype not in _DTYPE_CODES:
            raise TypeError(f"params[{i}] must be float32, bfloat16 or float16, got {param.dtype}")
        if grad.dtype not in _DTYPE_CODES:
            raise TypeError(f"grads[{i}] must be float32, bfloat16 or float16, got {grad.dtype}")
        if grad.shape != param.shape:
            raise ValueError(
                f"grads[{i}] has shape {tuple(grad.shape)}, params[{i}] {tuple(param.shape)}"
            )
        checked: list[torch.Tensor] = [param, grad]
        for slot, (name, tensors) in enumerate(states.items()):
            state = _dense_cpu(tensors[i], f"{name}[{i}]")
            if state.dtype != torch.float32:
                raise TypeError(f"{name}[{i}] must be float32, got {state.dtype}")
            if state.numel() != param.numel():
                raise ValueError(
                    f"{name}[{i}] has {state.numel()} elements, params[{i}] {param.numel()}"
                )
            checked.append(state)
            batch.states[slot].append(state.data_ptr())
        if copy is not None:
            copy = _dense_cpu(copy, f"param_copies[{i}]")
            if copy.dtype not in _COPY_CODES:
                raise TypeError(f"param_copies[{i}] must be bfloat16 or float16, got {copy.dtype}")
            if copy.numel() != param.numel():
                raise ValueError(
                    f"param_copies[{i}] has {copy.numel()} elements, params[{i}] {param.numel()}"
                )
            checked.append(copy)
        for a in range(len(checked)):
            for b in range(a + 1, len(checked)):
                if _overlap(checked[a], checked[b]):
                    raise ValueError(
                        f"tensors of parameter {i} overlap in memory; each needs its own storage"
                    )
        batch.params.append(param.data_ptr())
        batch.grads.append(grad.data_ptr())
        batch.copies.append(copy.data_ptr() if copy is not None else 0)
        batch.numels.append(param.numel())
        batch.param_dtypes.append(_DTYPE_CODES[param.dtype])
        batch.grad_dtypes.append(_DTYPE_CODES[grad.dtype])
        batch.copy_dtypes.append(_COPY_CODES[copy.dtype] if copy is not None else NO_COPY)
    return batch


def _steps(steps: Sequence[int], count: int) -> list[int]:
    if len(steps) != count:
        raise ValueError(f"steps has {len(steps)} entries, expected {count}")
    checked = [int(s) for s in steps]
    if any(s < 1 for s in checked):
        raise ValueError(f"steps must all be >= 1 (the step being taken), got {checked}")
    return checked


def adam_step(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    exp_avgs: Sequence[torch.Tensor],
    exp_avg_sqs: Sequence[torch.Tensor],
    steps: Sequence[int],
    *,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
    adamw: bool,
    bias_correction: bool = True,
    param_copies: Sequence[torch.Tensor | None] | None = None,
) -> None:
    """One Adam (``adamw=False``: L2 decay) or AdamW step, in place, over all tensors.

    ``steps[i]`` is the number of the step being taken for parameter ``i`` (1 on the
    first). ``param_copies[i]``, when given, receives the updated parameter rounded to
    bf16/fp16 in the same pass (the ZeRO-Offload pattern).
    """
    batch = _batch(params, grads, {"exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs}, param_copies)
    beta1, beta2 = check_betas(betas)
    native().adam_step(
        batch.params, batch.grads, batch.states[0], batch.states[1], batch.copies, batch.numels,
        batch.param_dtypes, batch.grad_dtypes, batch.copy_dtypes, _steps(steps, len(params)),
        check_non_negative(lr, "lr"), beta1, beta2, check_eps(eps),
        check_non_negative(weight_decay, "weight_decay"), bool(adamw), bool(bias_correction),
    )  # fmt: skip


def adagrad_step(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    sums: Sequence[torch.Tensor],
    steps: Sequence[int],
    *,
    lr: float,
    lr_decay: float,
    eps: float,
    weight_decay: float,
    param_copies: Sequence[torch.Tensor | None] | None = None,
) -> None:
    """One Adagrad step, in place, over all tensors (``steps`` as in :func:`adam_step`)."""
    batch = _batch(params, grads, {"sums": sums}, param_copies)
    native().adagrad_step(
        batch.params, batch.grads, batch.states[0], batch.copies, batch.numels,
        batch.param_dtypes, batch.grad_dtypes, batch.copy_dtypes, _steps(steps, len(params)),
        check_non_negative(lr, "lr"), check_non_negative(lr_decay, "lr_decay"), check_eps(eps),
        check_non_negative(weight_decay, "weight_decay"),
    )  # fmt: skip


def lion_step(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    exp_avgs: Sequence[torch.Tensor],
    *,
    lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    param_copies: Sequence[torch.Tensor | None] | None = None,
) -> None:
    """One Lion step (decoupled weight decay), in place, over all tensors."""
    batch = _batch(params, grads, {"exp_avgs": exp_avgs}, param_copies)
    native().lion_step(
        batch.params, batch.grads, batch.states[0], batch.copies, batch.numels,
        batch.param_dtypes, batch.grad_dtypes, batch.copy_dtypes, check_non_negative(lr, "lr"),
        *check_betas(betas),
        check_non_negative(weight_decay, "weight_decay"),
    )  # fmt: skip
