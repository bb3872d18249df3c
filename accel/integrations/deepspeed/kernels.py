"""DeepSpeed's native op modules, with DeepSpeed's exact Python API, over accel's kernels.

``CPUAdamBuilder().load()`` in DeepSpeed returns a compiled module with ``create_adam``,
``adam_update``, ... ; the objects here expose the same functions (same positional
arguments, same return values) and run accel's prebuilt, validating kernels
(:mod:`accel.ops.cpu_optim`, :mod:`accel.comm`). Differences, all on inputs DeepSpeed's
modules mishandle:

- ``create_*`` checks its hyper-parameters at once (a bad config fails at construction)
  and keeps only ``adamw_mode``: every update passes, and is checked for, its own;
  ``should_log`` prints nothing;
- the ``*_update`` and ``multi_tensor_*`` functions check every input before any tensor
  changes, with an exception naming it: an unknown optimizer id raises ``KeyError``
  (DeepSpeed dereferences a null pointer), a parameter or gradient not
  float32/bfloat16/float16 ``TypeError``, and a tensor off the CPU, of another shape,
  overlapping another, a step below 1 or a hyper-parameter out of range (a learning rate
  or weight decay not a finite number >= 0, a beta outside [0, 1), an epsilon not a
  finite number > 0; each at most float32's largest value) ``ValueError``
  (:mod:`accel.ops.cpu_optim`'s checks); ``adam_rollback`` checks the id, the dtypes,
  the shapes and the step (its hyper-parameters are those of the step it undoes);
- non-contiguous tensors are updated in place (DeepSpeed updates a temporary copy and
  the update is lost); 16-bit states are stepped in the kernel, like float32 ones, and
  states of other dtypes (or of two dtypes for one parameter) through float32 copies;
- a function of DeepSpeed's module that accel does not implement (none in DeepSpeed
  0.19.8) is taken from DeepSpeed's own build of the module when called, compiled then
  (logged) as without accel; looking it up builds nothing;
- ZenFlow's ``zenflow_adam_*`` report an error in the optimizer process to the training
  process (:mod:`accel.integrations.deepspeed.zenflow`);
- ``inference_all_reduce_`` reduces every dtype (DeepSpeed's returns float64 or integer
  tensors unreduced), through ``torch.distributed`` for dtypes shared memory does not take.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from typing_extensions import override

from accel._validate import (
    check_dense_cpu,
    check_disjoint,
    check_int,
    check_memory_holds_values,
    check_no_self_overlap,
    check_writable,
)
from accel.integrations.deepspeed.zenflow import ZenFlowAdamFunctions
from accel.ops import _hyperparameters as hyperparameters
from accel.ops import cpu_optim

logger = logging.getLogger("accel")

_SUCCESS = 0  # DeepSpeed's functions return 0 on success


@dataclass(frozen=True)
class _Created:
    """What DeepSpeed's ``create_*`` fixes for an optimizer id (only AdamW-vs-L2 matters:
    every update passes its hyper-parameters again)."""

    adamw_mode: bool = True


class _Registry:
    """DeepSpeed's per-process table of optimizer ids (a C++ static map there)."""

    def __init__(self, kind: str) -> None:
        self._kind = kind
        self._created: dict[int, _Created] = {}
        self._lock = threading.Lock()

    def create(self, optimizer_id: int, created: _Created) -> int:
        with self._lock:
            self._created[_checked_id(optimizer_id)] = created
        return _SUCCESS

    def get(self, optimizer_id: int) -> _Created:
        try:
            return self._created[_checked_id(optimizer_id)]
        except KeyError:
            raise KeyError(
                f"no {self._kind} optimizer with id {optimizer_id!r}: call create_{self._kind}"
                f"() first (created: {sorted(self._created)})"
            ) from None

    def destroy(self, optimizer_id: int) -> int:
        with self._lock:
            self._created.pop(_checked_id(optimizer_id), None)
        return _SUCCESS


def _checked_id(optimizer_id: object) -> int:
    """An optimizer id as DeepSpeed's C++ binding takes it: an integer (``int()`` made
    ``"1"`` and ``1.7`` id 1)."""
    return check_int(optimizer_id, "optimizer_id")


Update = Callable[[list[torch.Tensor], list[torch.Tensor], list[list[torch.Tensor]]], None]


_ROLLBACK_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_KERNEL_DTYPES = _ROLLBACK_DTYPES  # what accel.ops.cpu_optim takes for every tensor


def _state_dtype(states: Sequence[torch.Tensor]) -> torch.dtype:
    """The dtype one parameter's states are stepped in: their own when they share one the
    kernels take (16-bit states: DeepSpeed's ``fp32_optimizer_states=False``), else float32."""
    dtypes = {state.dtype for state in states}
    if len(dtypes) == 1 and (dtype := dtypes.pop()) in _KERNEL_DTYPES:
        return dtype
    return torch.float32


def _check_memory(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    states: dict[str, Sequence[torch.Tensor]],
) -> None:
    """What the kernels' own checks cannot see once copies are made, checked on the
    caller's tensors: dense CPU tensors whose memory holds their values (not past their
    storage's end: a copy would read and write beyond it); tensors written back that
    torch lets us write (no inference tensor outside inference mode) and whose elements
    do not share memory (an expanded view: the copy back would fail half-way); no tensor
    written sharing memory with another (two views of one storage stepped as two);
    floating-point states (an integer one would be truncated on the way back)."""
    written = [(p, f"params[{i}]") for i, p in enumerate(params)]
    written += [
        (t, f"{name}[{i}]") for name, column in states.items() for i, t in enumerate(column)
    ]
    read = [(g, f"grads[{i}]") for i, g in enumerate(grads)]
    for tensor, name in [*written, *read]:
        check_dense_cpu(tensor, name)
        check_memory_holds_values(tensor, name)
    for name, column in states.items():
        for i, state in enumerate(column):
            if not state.is_floating_point():
                raise TypeError(f"{name}[{i}] must be a floating-point tensor, got {state.dtype}")
    for tensor, name in written:
        check_writable(tensor, name)
        check_no_self_overlap(tensor, name)
    check_disjoint(written, read)


def _in_place(
    update: Update,
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    states: dict[str, Sequence[torch.Tensor]],
) -> None:
    """Run ``update(params, grads, states)`` on tensors the kernels accept (contiguous, a
    parameter's states of one float32/bfloat16/float16 dtype) and write the results back
    into the caller's tensors where copies had to be made. Every tensor is checked
    (:func:`_check_memory`, then the kernel's own checks in its one call) before any
    changes."""
    _check_memory(params, grads, states)
    columns = list(states.values())
    work_params = [p if p.is_contiguous() else p.contiguous() for p in params]
    work_grads = [g.contiguous() for g in grads]
    work_states: list[list[torch.Tensor]] = [[] for _ in columns]
    for index in range(len(params)):
        own = [column[index] for column in columns]
        dtype = _state_dtype(own)
        for work_column, state in zip(work_states, own, strict=True):
            work_column.append(state.to(dtype).contiguous())  # the state itself where it can
    update(work_params, work_grads, work_states)
    with torch.no_grad():  # a leaf that requires grad takes its values back too
        for column, work_column in zip(columns, work_states, strict=True):
            for original, work in zip(column, work_column, strict=True):
                if work is not original:
                    original.copy_(work)
        for original, work in zip(params, work_params, strict=True):
            if work is not original:
                original.copy_(work)


class DeepSpeedModule:
    """Base of the module stand-ins.

    A function of DeepSpeed's compiled module that accel does not implement (a newer
    DeepSpeed may add some) is found by name in DeepSpeed's binding source, without building
    anything, so ``hasattr`` answers at once and truly. It is loaded from DeepSpeed's own
    build only when called, which may JIT-compile for minutes: that call is logged at
    WARNING. Any other name is an ``AttributeError``.
    """

    def __init__(
        self,
        fallback: Callable[[], Any] | None = None,
        native_names: Callable[[], frozenset[str]] | None = None,
    ) -> None:
        self._fallback = fallback
        self._native_names = native_names
        self._names: frozenset[str] | None = None
        self._native: Any = None
        self._set_up()

    def _set_up(self) -> None:
        """What a module does once made, after the base's attributes are set."""

    def __getattr__(self, name: str) -> Any:
        declared = self.__dict__.get("_native_names")
        if not name.startswith("_") and declared is not None:
            names = self._names
            if names is None:
                names = self._names = declared()
            if name in names:
                return functools.partial(self._call_native, name)
        raise AttributeError(
            f"accel's prebuilt {type(self).__name__} has no {name!r}, and DeepSpeed's module "
            "declares none"
        )

    def _call_native(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.deepspeed_native(), name)(*args, **kwargs)

    def deepspeed_native(self) -> Any:
        """DeepSpeed's own compiled module for this op, built by DeepSpeed's JIT if it has
        not been (minutes, and a compiler); logged at WARNING because it is slow."""
        fallback = self.__dict__.get("_fallback")
        if fallback is None:
            raise RuntimeError(f"{type(self).__name__} has no DeepSpeed counterpart to load")
        if self._native is None:
            logger.warning(
                "%s: loading DeepSpeed's own build of the module for a function accel does "
                "not implement (DeepSpeed may JIT-compile it now, which takes minutes)",
                type(self).__name__,
            )
            self._native = fallback()
        return self._native


class _OptimizerModule(DeepSpeedModule):
    """The per-id optimizer table and the checks every ``create_*`` makes."""

    kind: ClassVar[str]

    @override
    def _set_up(self) -> None:
        super()._set_up()
        self._optimizers = _Registry(self.kind)

    def _create(
        self,
        optimizer_id: int,
        *,
        alpha: float,
        weight_decay: float,
        betas: tuple[float, float] | None = None,
        eps: float | None = None,
        adamw_mode: bool = True,
    ) -> int:
        # The values are checked now (a bad config fails at construction, as it should),
        # but every update passes its own: DeepSpeed reads them per call.
        hyperparameters.check_non_negative(alpha, "lr (alpha)")  # the optimizer's lr
        hyperparameters.check_non_negative(weight_decay, "weight_decay")
        if betas is not None:
            hyperparameters.check_betas(betas)
        if eps is not None:
            hyperparameters.check_eps(eps)
        return self._optimizers.create(
            optimizer_id, _Created(adamw_mode=hyperparameters.check_flag(adamw_mode, "adamw_mode"))
        )

    def _destroy(self, optimizer_id: int) -> int:
        """Forget an optimizer id (each module's ``destroy_<kind>``).

        Args:
            optimizer_id: The id; one that is not registered is ignored.

        Returns:
            0, DeepSpeed's success code.
        """
        return self._optimizers.destroy(optimizer_id)


class CPUAdamKernels(ZenFlowAdamFunctions, _OptimizerModule):
    """DeepSpeed's ``cpu_adam`` module: ``create_adam``, ``adam_update``,
    ``adam_rollback``, ``destroy_adam`` and ZenFlow's ``zenflow_adam_*``."""

    kind = "adam"

    @override
    def _set_up(self) -> None:
        super()._set_up()
        self._set_up_zenflow(self.adam_update)

    def create_adam(
        self,
        optimizer_id: int,
        alpha: float = 1e-3,
        betta1: float = 0.9,
        betta2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        adamw_mode: bool = True,
        should_log: bool = False,
    ) -> int:
        """Register ``optimizer_id``: AdamW (``adamw_mode``) or Adam with L2 decay."""
        return self._create(
            optimizer_id, alpha=alpha, weight_decay=weight_decay, betas=(betta1, betta2), eps=eps,
            adamw_mode=adamw_mode,
        )  # fmt: skip

    def adam_update(
        self,
        optimizer_id: int,
        step: int,
        lr: float,
        beta1: float,
        beta2: float,
        epsilon: float,
        weight_decay: float,
        bias_correction: bool,
        params: torch.Tensor,
        grads: torch.Tensor,
        exp_avg: torch.Tensor,
        exp_avg_sq: torch.Tensor,
    ) -> int:
        """One Adam/AdamW step of one tensor, in place."""
        adamw = self._optimizers.get(optimizer_id).adamw_mode
        _in_place(
            lambda p, g, s: cpu_optim.adam_step(
                p, g, s[0], s[1], [step], lr=lr, betas=(beta1, beta2), eps=epsilon,
                weight_decay=weight_decay, adamw=adamw, bias_correction=bias_correction,
            ),
            [params], [grads], {"exp_avg": [exp_avg], "exp_avg_sq": [exp_avg_sq]},
        )  # fmt: skip
        return _SUCCESS

    def adam_rollback(
        self,
        optimizer_id: int,
        step: int,
        lr: float,
        beta1: float,
        beta2: float,
        epsilon: float,
        weight_decay: float,
        bias_correction: bool,
        params: torch.Tensor,
        grads: torch.Tensor,
        exp_avg: torch.Tensor,
        exp_avg_sq: torch.Tensor,
    ) -> int:
        """Undo the AdamW step ``step`` (DeepSpeed's formula), in place.

        float32 tensors are restored up to float32 rounding. bfloat16/float16 ones go
        through float32 copies, so they are restored up to the rounding the undone step
        itself did. DeepSpeed's kernel takes float32 only: for the others it prints an
        error and returns -1, and ``DeepSpeedCPUAdam.rollback_subgroup`` then counts the
        step as undone although nothing changed (DeepSpeed's own test
        ``test_rollback_subgroup_basic[bf16]`` checks only that count). Other dtypes
        raise ``TypeError``; a tensor not of ``params``' shape, tensors that share memory, a
        ``step`` below 1, a hyper-parameter out of its range, a beta of 0 or ``lr *
        weight_decay`` of 1 (steps that cannot be undone) ``ValueError``, before any tensor
        changes. ``bias_correction`` is not used (the formula always undoes a
        bias-corrected step).
        """
        self._optimizers.get(optimizer_id)
        tensors = {"params": params, "grads": grads, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        for name, tensor in tensors.items():
            if tensor.dtype not in _ROLLBACK_DTYPES:
                expected = "float32, bfloat16 or float16"
                raise TypeError(f"adam_rollback: {name} must be {expected}, got {tensor.dtype}")
            if tensor.shape != params.shape:  # before any tensor changes
                raise ValueError(
                    f"adam_rollback: {name} must have params' shape {tuple(params.shape)}, "
                    f"got {tuple(tensor.shape)}"
                )
        step = hyperparameters.check_step(step, "adam_rollback: step")
        _check_memory([params], [grads], {"exp_avg": [exp_avg], "exp_avg_sq": [exp_avg_sq]})
        lr = hyperparameters.check_non_negative(lr, "lr")
        weight_decay = hyperparameters.check_non_negative(weight_decay, "weight_decay")
        epsilon = hyperparameters.check_eps(epsilon)
        beta1, beta2 = (
            hyperparameters.check_beta(b, n) for b, n in ((beta1, "beta1"), (beta2, "beta2"))
        )
        if beta1 == 0.0 or beta2 == 0.0:
            raise ValueError(
                f"adam_rollback: beta1 and beta2 must be > 0 to undo a step (with 0 the step "
                f"kept nothing of the moments before it), got {beta1} and {beta2}"
            )
        if lr * weight_decay == 1.0:
            raise ValueError(
                f"adam_rollback: lr * weight_decay is 1 ({lr} * {weight_decay}): the step set "
                "the parameters to its update alone, so they cannot be restored"
            )
        with torch.no_grad():
            p, g, m, v = (t if t.dtype == torch.float32 else t.float() for t in tensors.values())
            bias1, bias2 = 1.0 - beta1**step, 1.0 - beta2**step
            denominator = (v / bias2).sqrt_().add_(epsilon)
            update = (m / bias1).div_(denominator).mul_(lr)
            restored = (p + update).div_(1.0 - lr * weight_decay)
            params.copy_(torch.where(restored.isfinite(), restored, 0.0))
            exp_avg.copy_(m.sub_(g, alpha=1.0 - beta1).div_(beta1))
            exp_avg_sq.copy_(v.sub_(g * g, alpha=1.0 - beta2).div_(beta2))
        return _SUCCESS

    destroy_adam = _OptimizerModule._destroy


class CPUAdagradKernels(_OptimizerModule):
    """DeepSpeed's ``cpu_adagrad`` module."""

    kind = "adagrad"

    def create_adagrad(
        self,
        optimizer_id: int,
        alpha: float = 1e-2,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        should_log: bool = False,
    ) -> int:
        """Register ``optimizer_id``."""
        return self._create(optimizer_id, alpha=alpha, weight_decay=weight_decay, eps=eps)

    def adagrad_update(
        self,
        optimizer_id: int,
        step: int,
        lr: float,
        epsilon: float,
        weight_decay: float,
        params: torch.Tensor,
        grads: torch.Tensor,
        exp_avg_sq: torch.Tensor,
    ) -> int:
        """One Adagrad step of one tensor, in place (L2 weight decay, no lr decay)."""
        self._optimizers.get(optimizer_id)
        _in_place(
            lambda p, g, s: cpu_optim.adagrad_step(
                p, g, s[0], [step], lr=lr, lr_decay=0.0, eps=epsilon, weight_decay=weight_decay
            ),
            [params], [grads], {"exp_avg_sq": [exp_avg_sq]},
        )  # fmt: skip
        return _SUCCESS

    destroy_adagrad = _OptimizerModule._destroy


class CPULionKernels(_OptimizerModule):
    """DeepSpeed's ``cpu_lion`` module."""

    kind = "lion"

    def create_lion(
        self,
        optimizer_id: int,
        alpha: float = 1e-3,
        betta1: float = 0.9,
        betta2: float = 0.999,
        weight_decay: float = 0.0,
        should_log: bool = False,
    ) -> int:
        """Register ``optimizer_id``."""
        return self._create(
            optimizer_id, alpha=alpha, weight_decay=weight_decay, betas=(betta1, betta2)
        )

    def lion_update(
        self,
        optimizer_id: int,
        step: int,
        lr: float,
        beta1: float,
        beta2: float,
        weight_decay: float,
        params: torch.Tensor,
        grads: torch.Tensor,
        exp_avg: torch.Tensor,
    ) -> int:
        """One Lion step of one tensor, in place (decoupled weight decay). ``step`` is
        checked as :meth:`CPUAdamKernels.adam_update` checks it (a whole number >= 1), then
        not used: a Lion step does not depend on its number."""
        self._optimizers.get(optimizer_id)
        hyperparameters.check_step(step, "step")
        _in_place(
            lambda p, g, s: cpu_optim.lion_step(
                p, g, s[0], lr=lr, betas=(beta1, beta2), weight_decay=weight_decay
            ),
            [params], [grads], {"exp_avg": [exp_avg]},
        )  # fmt: skip
        return _SUCCESS

    destroy_lion = _OptimizerModule._destroy


def _tensor_lists(
    tensor_lists: Sequence[Sequence[torch.Tensor]], names: Sequence[str]
) -> list[list[torch.Tensor]]:
    if len(tensor_lists) != len(names):
        raise ValueError(
            f"tensor_lists must hold {len(names)} lists ({', '.join(names)}), "
            f"got {len(tensor_lists)}"
        )
    lists = [list(tensors) for tensors in tensor_lists]
    for name, tensors in zip(names[1:], lists[1:], strict=True):
        if len(tensors) != len(lists[0]):
            raise ValueError(
                f"tensor_lists: {name} has {len(tensors)} tensors, grads {len(lists[0])}"
            )
    return lists


class FusedAdamKernels(DeepSpeedModule):
    """DeepSpeed's ``fused_adam`` module on the CPU: ``multi_tensor_adam``."""

    def multi_tensor_adam(
        self,
        chunk_size: int,
        noop_flag: torch.Tensor,
        tensor_lists: Sequence[Sequence[torch.Tensor]],
        lr: float,
        beta1: float,
        beta2: float,
        epsilon: float,
        step: int,
        mode: int,
        bias_correction: int,
        weight_decay: float,
    ) -> None:
        """One Adam step over ``[grads, params, exp_avgs, exp_avg_sqs]`` (``mode`` 1 is
        AdamW, 0 Adam with L2 decay, another value a ``ValueError``). ``chunk_size`` and
        ``noop_flag`` are the CUDA launcher's and are not used on the CPU, as in DeepSpeed's CPU
        kernel; ``tensor_lists`` of another length, or lists of unequal lengths, are a
        ``ValueError``."""
        if mode not in (0, 1):
            raise ValueError(f"mode must be 0 (Adam, L2 decay) or 1 (AdamW), got {mode!r}")
        correct_bias = hyperparameters.check_flag(bias_correction, "bias_correction")
        grads, params, exp_avgs, exp_avg_sqs = _tensor_lists(
            tensor_lists, ("grads", "params", "exp_avgs", "exp_avg_sqs")
        )
        _in_place(
            lambda p, g, s: cpu_optim.adam_step(
                p, g, s[0], s[1], [step] * len(p), lr=lr, betas=(beta1, beta2), eps=epsilon,
                weight_decay=weight_decay, adamw=mode == 1, bias_correction=correct_bias,
            ),
            params, grads, {"exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs},
        )  # fmt: skip


class FusedLionKernels(DeepSpeedModule):
    """DeepSpeed's ``fused_lion`` module, which DeepSpeed has no CPU version of."""

    def multi_tensor_lion(
        self,
        chunk_size: int,
        noop_flag: torch.Tensor,
        tensor_lists: Sequence[Sequence[torch.Tensor]],
        lr: float,
        beta1: float,
        beta2: float,
        step: int,
        weight_decay: float,
    ) -> None:
        """One Lion step over ``[grads, params, exp_avgs]``, the lists and ``step`` checked
        as :meth:`FusedAdamKernels.multi_tensor_adam` checks its own (``step``, a whole
        number >= 1, is then not used: a Lion step does not depend on its number)."""
        hyperparameters.check_step(step, "step")
        grads, params, exp_avgs = _tensor_lists(tensor_lists, ("grads", "params", "exp_avgs"))
        _in_place(
            lambda p, g, s: cpu_optim.lion_step(
                p, g, s[0], lr=lr, betas=(beta1, beta2), weight_decay=weight_decay
            ),
            params, grads, {"exp_avgs": exp_avgs},
        )  # fmt: skip
