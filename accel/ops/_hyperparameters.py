"""Range checks of optimizer hyper-parameters, shared by every optimizer front end.

Each returns the value as a ``float`` (a switch as a ``bool``) or raises ``ValueError``
naming the argument, its value and the range expected. Real numbers are accepted (``int``,
``float``, NumPy's scalars), ``bool`` is not.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from typing_extensions import TypeIs

# The kernels compute in float32: a hyper-parameter beyond its range would become inf,
# and an epsilon below its smallest (subnormal) value 0, dividing by zero.
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.401298464324817e-45


def _is_number(value: object) -> TypeIs[int | float]:
    # numbers.Real takes NumPy's scalars too (np.float32(0.9) is a fine beta).
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


def check_beta(value: object, name: str) -> float:
    """A beta in [0, 1); ``name`` is the argument's, for the error."""
    if not _is_number(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return float(value)


def check_betas(betas: object) -> tuple[float, float]:
    """A tuple or list of two betas, each in [0, 1)."""
    if isinstance(betas, (tuple, list)):
        pair = cast("Sequence[object]", betas)
        if len(pair) == 2:
            return check_beta(pair[0], "betas[0]"), check_beta(pair[1], "betas[1]")
    raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")


def check_eps(eps: object) -> float:
    """An epsilon from float32's smallest positive value to its largest."""
    if not _is_number(eps) or not FLOAT32_TINY <= eps <= FLOAT32_MAX:
        raise ValueError(
            f"eps must be a finite number > 0 that float32 holds ({FLOAT32_TINY:.4g} to "
            f"{FLOAT32_MAX:.4g}), got {eps!r}"
        )
    return float(eps)


def check_non_negative(value: object, name: str) -> float:
    """A number from 0 to float32's largest value (learning rate, weight decay, lr decay);
    NaN and infinities are out of range. ``name`` is the argument's, for the error."""
    if not _is_number(value) or not 0 <= value <= FLOAT32_MAX:  # False for NaN
        raise ValueError(
            f"{name} must be a finite number >= 0 (at most float32's {FLOAT32_MAX:.4g}), "
            f"got {value!r}"
        )
    return float(value)


def _is_numpy_bool(value: object) -> bool:
    kind = type(value)
    return kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")


def check_flag(value: object, name: str) -> bool:
    """A switch: ``True``/``False`` (NumPy's too), or the integer 1 or 0 (DeepSpeed passes
    its ``bias_correction`` as one); ``name`` is the argument's, for the error. Any other
    value (``"no"``, ``2``, ``None``) raises rather than counting as true or false."""
    if isinstance(value, bool) or _is_numpy_bool(value):
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{name} must be True or False (or 1 or 0), got {value!r}")


def check_step(step: object, name: str) -> int:
    """The number of the step being taken: a whole number from 1 to below 2**63, given as
    an integer, a whole float or a one-element tensor holding one (torch.optim keeps its
    step counts as float tensors). Truncating 2.5 would take another step's bias
    correction, so it raises; ``name`` is the argument's, for the error."""
    value = step.item() if isinstance(step, torch.Tensor) and step.numel() == 1 else step
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value != int(value)
    ):
        raise ValueError(f"{name} must be a whole number >= 1, got {step!r}")
    if not 1 <= value < 2**63:
        raise ValueError(
            f"{name} must be >= 1 (the step being taken) and below 2**63, got {step!r}"
        )
    return int(value)


# The range of each hyper-parameter, by the name optimizers give it.
_RULES: dict[str, Callable[[object], Any]] = {
    "lr": lambda value: check_non_negative(value, "lr"),
    "lr_decay": lambda value: check_non_negative(value, "lr_decay"),
    "weight_decay": lambda value: check_non_negative(value, "weight_decay"),
    "initial_accumulator_value": lambda value: check_non_negative(
        value, "initial_accumulator_value"
    ),
    "betas": check_betas,
    "eps": check_eps,
}


def checked(**values: object) -> dict[str, Any]:
    """The hyper-parameters given, each checked by the rule for its name, in order."""
    return {name: _RULES[name](value) for name, value in values.items()}
