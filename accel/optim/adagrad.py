"""CPUAdagrad: Adagrad on the CPU."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch.optim.optimizer import ParamsT
from typing_extensions import override

from accel.ops import _hyperparameters as hyperparameters
from accel.ops import cpu_optim
from accel.optim._base import CPUOptimizer, GroupTensors


class CPUAdagrad(CPUOptimizer):
    """Adagrad matching ``torch.optim.Adagrad`` to fp32 rounding; state key ``sum``.

    Args:
        params: The parameters, or param groups, as ``torch.optim`` takes them.
        lr: The learning rate, >= 0.
        lr_decay: >= 0.
        weight_decay: L2 weight decay, >= 0.
        initial_accumulator_value: The ``sum`` state's start, >= 0.
        eps: Added to the denominator, > 0.

    Raises:
        ValueError: A hyperparameter is out of range (the message names it).
    """

    state_names = ("sum",)
    torch_flags: ClassVar[dict[str, bool | None]] = {
        "foreach": None, "maximize": False, "differentiable": False, "fused": None,
    }  # fmt: skip
    unsupported_flags = ("maximize", "differentiable")

    def __init__(
        self,
        params: ParamsT,
        lr: float | torch.Tensor = 1e-2,
        lr_decay: float | torch.Tensor = 0.0,
        weight_decay: float | torch.Tensor = 0.0,
        initial_accumulator_value: float | torch.Tensor = 0.0,
        eps: float | torch.Tensor = 1e-10,
    ) -> None:
        defaults = hyperparameters.checked(
            lr=lr,
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            eps=eps,
        )
        super().__init__(params, defaults)

    @override
    def initial_state(self, group: dict[str, Any], param: torch.Tensor) -> dict[str, torch.Tensor]:
        """``sum`` starts at the constructor's ``initial_accumulator_value``: as in
        ``torch.optim.Adagrad``, a param group's own value is not used."""
        start = float(self.defaults["initial_accumulator_value"])
        return {"sum": torch.full(param.shape, start, dtype=torch.float32)}

    @override
    def _apply(self, group: dict[str, Any], tensors: GroupTensors) -> None:
        cpu_optim.adagrad_step(
            tensors.params,
            tensors.grads,
            tensors.states["sum"],
            tensors.steps,
            lr=group["lr"],
            lr_decay=group["lr_decay"],
            eps=group["eps"],
            weight_decay=group["weight_decay"],
        )
