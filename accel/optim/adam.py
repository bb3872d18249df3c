"""CPUAdam: Adam and AdamW on the CPU (the DeepSpeed CPUAdam / ZeRO-Offload job)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch.optim.optimizer import ParamsT
from typing_extensions import override

from accel.ops import _hyperparameters as hyperparameters
from accel.ops import cpu_optim
from accel.optim._base import CPUOptimizer, GroupTensors, hyper


class CPUAdam(CPUOptimizer):
    """Adam (``adamw_mode=False``, L2 weight decay) or AdamW (decoupled weight decay).

    Matches ``torch.optim.Adam``/``AdamW`` to fp32 rounding. Parameters and gradients may
    be float32, bfloat16 or float16; ``exp_avg`` and ``exp_avg_sq`` are always float32.
    Param groups carry torch's keys (``decoupled_weight_decay``, ``amsgrad`` ...), so a
    ``state_dict()`` loads into ``torch.optim.AdamW`` and back. A group chooses AdamW with
    ``decoupled_weight_decay`` (``adamw_mode`` in a group is refused); one loaded without
    it (a checkpoint of an older torch) takes the constructor's ``adamw_mode``.

    Args:
        params: The parameters, or param groups, as ``torch.optim`` takes them.
        lr: The learning rate, >= 0.
        betas: The moments' decay rates, each in ``[0, 1)``.
        eps: Added to the denominator, > 0.
        weight_decay: >= 0; decoupled with ``adamw_mode``, L2 otherwise.
        adamw_mode: AdamW rather than Adam.
        bias_correction: Correct the moments' bias towards zero.

    Raises:
        ValueError: A hyperparameter is out of range (the message names it).
    """

    state_names = ("exp_avg", "exp_avg_sq")
    torch_flags: ClassVar[dict[str, bool | None]] = {
        "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
        "differentiable": False, "fused": None,
    }  # fmt: skip
    unsupported_flags = ("amsgrad", "maximize", "differentiable")

    def __init__(
        self,
        params: ParamsT,
        lr: float | torch.Tensor = 1e-3,
        betas: tuple[float | torch.Tensor, float | torch.Tensor] = (0.9, 0.999),
        eps: float | torch.Tensor = 1e-8,
        weight_decay: float | torch.Tensor = 0.0,
        adamw_mode: bool = True,
        bias_correction: bool = True,
    ) -> None:
        defaults: dict[str, Any] = {
            **hyperparameters.checked(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay),
            "decoupled_weight_decay": hyperparameters.check_flag(adamw_mode, "adamw_mode"),
            "bias_correction": hyperparameters.check_flag(bias_correction, "bias_correction"),
        }
        super().__init__(params, defaults)

    @override
    def _apply(self, group: dict[str, Any], tensors: GroupTensors) -> None:
        if "adamw_mode" in group:  # the constructor's name; torch's key would be ignored
            raise ValueError(
                f"sets adamw_mode={group['adamw_mode']!r}: a param group says it with torch's "
                "key, decoupled_weight_decay"
            )
        decoupled = hyper(group, self.defaults, "decoupled_weight_decay")
        cpu_optim.adam_step(
            tensors.params,
            tensors.grads,
            tensors.states["exp_avg"],
            tensors.states["exp_avg_sq"],
            tensors.steps,
            lr=group["lr"],
            betas=group["betas"],
            eps=group["eps"],
            weight_decay=group["weight_decay"],
            adamw=hyperparameters.check_flag(decoupled, "decoupled_weight_decay"),
            bias_correction=hyper(group, self.defaults, "bias_correction"),
        )
