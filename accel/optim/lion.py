"""CPULion: the Lion optimizer (Chen et al., 2023) on the CPU."""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.optimizer import ParamsT
from typing_extensions import override

from accel.ops import _hyperparameters as hyperparameters
from accel.ops import cpu_optim
from accel.optim._base import CPUOptimizer, GroupTensors


class CPULion(CPUOptimizer):
    """Lion: ``p -= lr * sign(beta1*m + (1-beta1)*g)``, then ``m = beta2*m + (1-beta2)*g``.

    Weight decay is decoupled (``p *= 1 - lr*wd`` first), as in the paper. State key
    ``exp_avg`` (fp32).

    Args:
        params: The parameters, or param groups, as ``torch.optim`` takes them.
        lr: The learning rate, >= 0.
        betas: ``beta1`` and ``beta2``, each in ``[0, 1)``.
        weight_decay: Decoupled weight decay, >= 0.

    Raises:
        ValueError: A hyperparameter is out of range (the message names it).
    """

    state_names = ("exp_avg",)

    def __init__(
        self,
        params: ParamsT,
        lr: float | torch.Tensor = 1e-4,
        betas: tuple[float | torch.Tensor, float | torch.Tensor] = (0.9, 0.99),
        weight_decay: float | torch.Tensor = 0.0,
    ) -> None:
        super().__init__(
            params, hyperparameters.checked(lr=lr, betas=betas, weight_decay=weight_decay)
        )

    @override
    def _apply(self, group: dict[str, Any], tensors: GroupTensors) -> None:
        cpu_optim.lion_step(
            tensors.params,
            tensors.grads,
            tensors.states["exp_avg"],
            lr=group["lr"],
            betas=group["betas"],
            weight_decay=group["weight_decay"],
        )
