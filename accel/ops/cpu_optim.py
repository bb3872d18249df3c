"""Typed, validating front door to the native CPU optimizer kernels.

Every argument is checked here before any pointer reaches C++: tensors must be dense,
contiguous CPU tensors of supported dtypes (float32, bfloat16, float16), states the size of
their parameter and all of one parameter's states of one dtype, nothing written may share
memory with another tensor of the call (gradients, only read, may share memory with each
other, and may be inference tensors), and hyper-parameters must be in range. Errors name
the argument, the offending index and what was expected.

Every step function takes ``params`` (updated in place), their ``grads`` (one per
parameter), its states (one tensor per parameter each, updated in place), ``steps`` where
the step depends on its number (per parameter, the number of the step being taken: 1 on
the first), keyword hyper-parameters, and ``param_copies``: per parameter, a
bfloat16/float16 tensor that receives the updated parameter, rounded, in the same pass
(the ZeRO-Offload pattern), or ``None``; ``None`` for no copies. It raises:

- ``TypeError``: a tensor argument is not a ``torch.Tensor``, or is not float32, bfloat16
  or float16; a ``param_copies`` entry is not bfloat16 or float16;
- ``ValueError``: a list's length differs from ``params``'; a gradient is ``None``; a
  tensor is not dense, on the CPU and contiguous; a gradient's shape, or a state's or
  copy's element count, differs from its parameter's; a tensor written (a parameter, a
  state, a copy) overlaps another tensor of the call in memory; a ``steps`` entry is
  below 1; a hyper-parameter is out of range (each must be a real number, not a ``bool``,
  or a one-element floating-point or integer CPU tensor holding one, as ``torch.optim``
  takes them, finite and at most float32's largest value: learning rates and decays
  >= 0, betas in [0, 1), epsilons > 0; the kernels check the ranges again); or
  ``ACCEL_CPU_ISA`` holds a bad value when the kernels load (on first use);
- ``ImportError``: this install has no compiled CPU optimizer kernels.

The kernels compute in float32: a bfloat16/float16 parameter, gradient or state is widened
on the way in and rounded to nearest even on the way out, so its result is the float32
step's, rounded (16-bit states are what DeepSpeed's ``fp32_optimizer_states=False`` makes).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import NamedTuple

import torch

from accel._validate import (
    Span,
    check_dense_cpu,
    check_memory_holds_values,
    check_writable,
    require_disjoint_spans,
)
from accel.ops import isa
from accel.ops._dtypes import dtype_codes, dtype_list
from accel.ops._hyperparameters import (
    check_betas,
    check_eps,
    check_flag,
    check_non_negative,
    check_step,
)

NO_COPY = -1
_COPY_DTYPES = (torch.bfloat16, torch.float16)


def _native() -> ModuleType:
    """The compiled kernels (``ImportError`` with the reason if this install has none;
    ``ValueError`` for a bad ``ACCEL_CPU_ISA`` when they load).

    Private: they take raw addresses, and a wrong address cannot be told from a right one
    in C++; only the checked functions of this module call them.
    """
    return isa.load_native("accel.ops._cpu_optim")


@functools.cache
def _codes() -> dict[torch.dtype, int]:
    return dtype_codes(_native())


class _Batch(NamedTuple):
    """One call's buffers as the kernels take them: addresses, sizes and dtype codes. (A
    NamedTuple, not a dataclass: a frozen dataclass costs ~1 ms to make at import, on the
    way of every ``CPUAdamBuilder().load()``.)"""

    params: list[int]
    grads: list[int]
    states: dict[str, list[int]]  # by the kernel's keyword for them
    copies: list[int]
    numels: list[int]
    param_dtypes: list[int]
    grad_dtypes: list[int]
    copy_dtypes: list[int]
    state_dtypes: list[int]
    # The tensors themselves, for as long as the call runs (the kernels hold addresses
    # only, without the GIL: another thread emptying the caller's lists must not free
    # them): those the step only reads, and those it writes, whose versions it bumps.
    read: list[torch.Tensor]
    written: list[torch.Tensor]

    def kernel_arguments(self) -> dict[str, list[int]]:
        """The buffers as keyword arguments of every kernel in ``_cpu_optim``."""
        return {
            "params": self.params, "grads": self.grads, **self.states, "copies": self.copies,
            "numels": self.numels, "param_dtypes": self.param_dtypes,
            "grad_dtypes": self.grad_dtypes, "copy_dtypes": self.copy_dtypes,
            "state_dtypes": self.state_dtypes,
        }  # fmt: skip


def _dense_cpu(tensor: object, kind: str, index: int, *, written: bool = True) -> torch.Tensor:
    """``tensor`` if the kernels may use its memory (and update it in place, if ``written``),
    else the error naming ``kind[index]``."""
    # The common case in one expression, without formatting a name: a step checks every
    # tensor of the group on each call (`benchmarks/optim_step.py --case "150 tensors"`).
    if (
        isinstance(tensor, torch.Tensor)
        and tensor.layout == torch.strided
        and tensor.is_cpu
        and tensor.is_contiguous()
        and not (tensor.is_neg() or tensor.is_conj() or (written and tensor.is_inference()))
        and tensor.storage_offset() * tensor.element_size() + tensor.nbytes
        <= tensor.untyped_storage().nbytes()
    ):
        return tensor
    what = f"{kind}[{index}]"
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(tensor).__name__}")
    check_dense_cpu(tensor, what)
    if not tensor.is_contiguous():
        if not written:
            raise ValueError(f"{what} must be contiguous (call .contiguous())")
        raise ValueError(
            f"{what} must be contiguous: the step updates it in place, so a contiguous copy "
            "would not do (a transposed or channels_last parameter: keep its module in "
            "torch.contiguous_format, model.to(memory_format=torch.contiguous_format))"
        )
    check_memory_holds_values(tensor, what)
    if written:
        check_writable(tensor, what)
    return tensor


def _bump_versions(batch: _Batch) -> None:
    """Mark what the step wrote as changed in place, as torch's own optimizers do: a
    backward that saved one of them before the step then raises instead of using it."""
    written = batch.written
    if torch.is_inference_mode_enabled():  # its tensors keep no version counter
        written = [t for t in written if not t.is_inference()]
    if written:
        torch.autograd.graph.increment_version(written)


def _batch(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    states: dict[str, Sequence[torch.Tensor]],
    param_copies: Sequence[torch.Tensor | None] | None,
) -> _Batch:
    # Taken once: the lists may change under us (another thread), the tuples do not.
    params, grads = tuple(params), tuple(grads)
    states = {name: tuple(tensors) for name, tensors in states.items()}
    count = len(params)
    if len(grads) != count:
        raise ValueError(f"grads has {len(grads)} entries, expected one per parameter ({count})")
    for name, tensors in states.items():
        if len(tensors) != count:
            raise ValueError(f"{name} has {len(tensors)} entries, expected {count}")
    copies = list(param_copies) if param_copies is not None else [None] * count
    if len(copies) != count:
        raise ValueError(f"param_copies has {len(copies)} entries, expected {count}")
    codes = _codes()
    batch = _Batch([], [], {name: [] for name in states}, [], [], [], [], [], [], [], [])
    # Every buffer of the call: the kernels update them in place in parallel and promise
    # the compiler that none alias (__restrict), so a byte written that another buffer
    # shares would give nondeterministic results. Gradients are only read: they may share
    # memory with each other.
    spans: list[Span] = []
    names: list[tuple[str, int]] = []
    for i, (param, grad, copy) in enumerate(zip(params, grads, copies, strict=True)):
        param = _dense_cpu(param, "params", i)
        if grad is None:
            raise ValueError(f"grads[{i}] is None: parameter {i} has no gradient")
        grad = _dense_cpu(grad, "grads", i, written=False)
        if param.dtype not in codes:
            raise TypeError(f"params[{i}] must be {dtype_list(codes)}, got {param.dtype}")
        if grad.dtype not in codes:
            raise TypeError(f"grads[{i}] must be {dtype_list(codes)}, got {grad.dtype}")
        if grad.shape != param.shape:
            raise ValueError(
                f"grads[{i}] has shape {tuple(grad.shape)}, params[{i}] {tuple(param.shape)}"
            )
        _add_span(spans, names, param, "params", i)
        _add_span(spans, names, grad, "grads", i, written=False)
        state_dtype: torch.dtype | None = None  # the first state's; the others must match
        first_state = ""
        for name, tensors in states.items():
            state = _dense_cpu(tensors[i], name, i)
            if state.dtype not in codes:
                raise TypeError(f"{name}[{i}] must be {dtype_list(codes)}, got {state.dtype}")
            if state_dtype is None:
                state_dtype, first_state = state.dtype, f"{name}[{i}]"
            elif state.dtype != state_dtype:
                raise TypeError(
                    f"{name}[{i}] is {state.dtype} and {first_state} {state_dtype}: "
                    f"a parameter's states must share one dtype"
                )
            if state.numel() != param.numel():
                raise ValueError(
                    f"{name}[{i}] has {state.numel()} elements, params[{i}] {param.numel()}"
                )
            _add_span(spans, names, state, name, i)
            batch.states[name].append(state.data_ptr())
            batch.written.append(state)
        if copy is not None:
            copy = _dense_cpu(copy, "param_copies", i)
            if copy.dtype not in _COPY_DTYPES:
                raise TypeError(
                    f"param_copies[{i}] must be {dtype_list(_COPY_DTYPES)}, got {copy.dtype}"
                )
            if copy.numel() != param.numel():
                raise ValueError(
                    f"param_copies[{i}] has {copy.numel()} elements, params[{i}] {param.numel()}"
                )
            _add_span(spans, names, copy, "param_copies", i)
        batch.read.append(grad)
        batch.written.append(param)
        if copy is not None:
            batch.written.append(copy)
        batch.params.append(param.data_ptr())
        batch.grads.append(grad.data_ptr())
        batch.copies.append(copy.data_ptr() if copy is not None else 0)
        batch.numels.append(param.numel())
        batch.param_dtypes.append(codes[param.dtype])
        batch.grad_dtypes.append(codes[grad.dtype])
        batch.copy_dtypes.append(codes[copy.dtype] if copy is not None else NO_COPY)
        batch.state_dtypes.append(codes[state_dtype or torch.float32])
    require_disjoint_spans(spans, lambda k: "{}[{}]".format(*names[k]))
    return batch


def _add_span(
    spans: list[Span],
    names: list[tuple[str, int]],
    tensor: torch.Tensor,
    kind: str,
    index: int,
    *,
    written: bool = True,
) -> None:
    if tensor.numel():  # contiguous, checked: its bytes are its extent
        start = tensor.data_ptr()
        spans.append((start, start + tensor.nbytes, len(names), written))
        names.append((kind, index))


def _run(kernel: Callable[..., None], batch: _Batch, **scalars: object) -> None:
    """``kernel`` on ``batch``'s buffers with ``scalars`` (checked), then the versions bumped."""
    kernel(**batch.kernel_arguments(), **scalars)
    _bump_versions(batch)


def _steps(steps: Sequence[int], count: int) -> list[int]:
    if len(steps) != count:
        raise ValueError(f"steps has {len(steps)} entries, expected {count}")
    return [check_step(step, f"steps[{index}]") for index, step in enumerate(steps)]


def adam_step(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    exp_avgs: Sequence[torch.Tensor],
    exp_avg_sqs: Sequence[torch.Tensor],
    steps: Sequence[int],
    *,
    lr: float | torch.Tensor,
    betas: tuple[float | torch.Tensor, float | torch.Tensor],
    eps: float | torch.Tensor,
    weight_decay: float | torch.Tensor,
    adamw: bool,
    bias_correction: bool = True,
    param_copies: Sequence[torch.Tensor | None] | None = None,
) -> None:
    """One Adam (``adamw=False``: L2 decay) or AdamW step, in place, over all tensors.

    Args:
        exp_avgs: The first-moment states, one per parameter, updated in place.
        exp_avg_sqs: The second-moment states, one per parameter, updated in place.
        lr: The learning rate, ``>= 0``.
        betas: ``(beta1, beta2)``, each in [0, 1).
        eps: Added to the denominator, ``> 0``.
        weight_decay: ``>= 0``; decoupled (AdamW) when ``adamw``, else added to the
            gradient (L2).
        adamw: AdamW's decoupled weight decay instead of Adam's L2.
        bias_correction: Correct the moments for their zero start.

    Raises:
        TypeError: One parameter's two states differ in dtype (and as every step function).
    """
    batch = _batch(params, grads, {"exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs}, param_copies)
    beta1, beta2 = check_betas(betas)
    _run(
        _native().adam_step, batch, steps=_steps(steps, len(params)),
        lr=check_non_negative(lr, "lr"), beta1=beta1, beta2=beta2, eps=check_eps(eps),
        weight_decay=check_non_negative(weight_decay, "weight_decay"),
        decoupled=check_flag(adamw, "adamw"),
        bias_correction=check_flag(bias_correction, "bias_correction"),
    )  # fmt: skip


def adagrad_step(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    sums: Sequence[torch.Tensor],
    steps: Sequence[int],
    *,
    lr: float | torch.Tensor,
    lr_decay: float | torch.Tensor,
    eps: float | torch.Tensor,
    weight_decay: float | torch.Tensor,
    param_copies: Sequence[torch.Tensor | None] | None = None,
) -> None:
    """One Adagrad step, in place, over all tensors.

    Args:
        sums: The sums of squared gradients, one per parameter, updated in place.
        lr: The learning rate, ``>= 0``.
        lr_decay: ``>= 0``; step ``t`` uses ``lr / (1 + (t - 1) * lr_decay)``.
        eps: Added to the denominator, ``> 0``.
        weight_decay: ``>= 0``, added to the gradient (L2).
    """
    batch = _batch(params, grads, {"sums": sums}, param_copies)
    _run(
        _native().adagrad_step, batch, steps=_steps(steps, len(params)),
        lr=check_non_negative(lr, "lr"), lr_decay=check_non_negative(lr_decay, "lr_decay"),
        eps=check_eps(eps), weight_decay=check_non_negative(weight_decay, "weight_decay"),
    )  # fmt: skip


def lion_step(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    exp_avgs: Sequence[torch.Tensor],
    *,
    lr: float | torch.Tensor,
    betas: tuple[float | torch.Tensor, float | torch.Tensor],
    weight_decay: float | torch.Tensor,
    param_copies: Sequence[torch.Tensor | None] | None = None,
) -> None:
    """One Lion step (decoupled weight decay), in place, over all tensors.

    Args:
        exp_avgs: The momentum states, one per parameter, updated in place.
        lr: The learning rate, ``>= 0``.
        betas: ``(beta1, beta2)``, each in [0, 1).
        weight_decay: ``>= 0``, decoupled.
    """
    batch = _batch(params, grads, {"exp_avgs": exp_avgs}, param_copies)
    beta1, beta2 = check_betas(betas)
    _run(
        _native().lion_step, batch, lr=check_non_negative(lr, "lr"), beta1=beta1, beta2=beta2,
        weight_decay=check_non_negative(weight_decay, "weight_decay"),
    )  # fmt: skip
