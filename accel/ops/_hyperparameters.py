"""Range checks of optimizer hyper-parameters, shared by every optimizer front end.

Each returns the value as a ``float`` (a switch as a ``bool``) or raises ``ValueError``
naming the argument, its value and the range expected. Real numbers are accepted (``int``,
``float``, NumPy's scalars), ``bool`` is not; so is a one-element floating-point or
integer CPU tensor holding one, as ``torch.optim`` takes a learning rate or betas (and its
checkpoints then carry them): its value is read when checked, that is at each step, as
torch's optimizers read it, so a scheduler that changes it in place is followed.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable, Sequence
from typing import Any, SupportsIndex, cast

import torch
from typing_extensions import TypeIs

# The kernels compute in float32: a hyper-parameter beyond its range would become inf,
# and an epsilon below its smallest (subnormal) value 0, dividing by zero.
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.401298464324817e-45


def _is_number(value: object) -> TypeIs[int | float]:
    # numbers.Real takes NumPy's scalars too (np.float32(0.9) is a fine beta).
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


_INTEGER_DTYPES = frozenset(
    {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
     torch.uint64}
)  # fmt: skip


def _read(value: object, name: str) -> tuple[object, str]:
    """``value`` (a one-element tensor: the number it holds now) and how an error shows it.
    A tensor torch.optim would not take as a hyper-parameter is a ``ValueError`` saying so."""
    if not isinstance(value, torch.Tensor):
        return value, repr(value)
    if (
        value.numel() != 1
        or value.layout != torch.strided
        or value.device.type != "cpu"
        or not (value.is_floating_point() or value.dtype in _INTEGER_DTYPES)
    ):
        layout = "" if value.layout == torch.strided else f", {value.layout}"
        raise ValueError(
            f"{name} must be a number, or a tensor of one floating-point or integer element "
            f"on the CPU (as torch.optim takes one), got a tensor of shape "
            f"{tuple(value.shape)}, {value.dtype}{layout}, on {value.device}; pass a number "
            f"(tensor.item()) or such a tensor"
        )
    number = value.item()
    return number, f"a tensor holding {number!r}"


def check_beta(value: object, name: str) -> float:
    """A beta in [0, 1); ``name`` is the argument's, for the error."""
    number, shown = _read(value, name)
    if not _is_number(number) or not 0.0 <= number < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {shown}")
    return float(number)


def check_betas(betas: object) -> tuple[float, float]:
    """A tuple or list of two betas, each in [0, 1)."""
    if isinstance(betas, (tuple, list)):
        pair = cast("Sequence[object]", betas)
        if len(pair) == 2:
            return check_beta(pair[0], "betas[0]"), check_beta(pair[1], "betas[1]")
    raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")


def check_eps(eps: object) -> float:
    """An epsilon from float32's smallest positive value to its largest."""
    number, shown = _read(eps, "eps")
    if not _is_number(number) or not FLOAT32_TINY <= number <= FLOAT32_MAX:
        raise ValueError(
            f"eps must be a finite number > 0 that float32 holds ({FLOAT32_TINY:.4g} to "
            f"{FLOAT32_MAX:.4g}), got {shown}"
        )
    return float(number)


def check_non_negative(value: object, name: str) -> float:
    """A number from 0 to float32's largest value (learning rate, weight decay, lr decay);
    NaN and infinities are out of range. ``name`` is the argument's, for the error."""
    number, shown = _read(value, name)
    if not _is_number(number) or not 0 <= number <= FLOAT32_MAX:  # False for NaN
        raise ValueError(
            f"{name} must be a finite number >= 0 (at most float32's {FLOAT32_MAX:.4g}), "
            f"got {shown}"
        )
    return float(number)


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


def whole_number(value: object) -> int | None:
    """``value`` as an ``int`` when it is a whole number, else ``None``: an integer (NumPy's
    too, through ``__index__``), a real number without a fraction (``2.0``), or a
    one-element tensor holding either (torch.optim keeps its step counts as float
    tensors). A ``bool`` is not a number here."""
    kind = type(value)
    if kind is int:  # every step of every parameter: the common cases first, cheaply
        return cast(int, value)
    if kind is float:
        number = cast(float, value)
        return int(number) if math.isfinite(number) and number == int(number) else None
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype == torch.bool or value.is_complex():
            return None
        value = value.item()
    if isinstance(value, bool) or _is_numpy_bool(value):
        return None
    if hasattr(type(value), "__index__"):  # isinstance(SupportsIndex) costs ~5 us
        try:
            return operator.index(cast(SupportsIndex, value))
        except TypeError:  # an array of several elements, say
            return None
    if _is_number(value):
        number = float(value)
        if math.isfinite(number) and number == int(number):
            return int(number)
    return None


def check_step(step: object, name: str) -> int:
    """The number of the step being taken: a whole number from 1 to below 2**63 (see
    :func:`whole_number`). Truncating 2.5 would take another step's bias correction, so it
    raises; ``name`` is the argument's, for the error."""
    value = whole_number(step)
    if value is None:
        raise ValueError(f"{name} must be a whole number >= 1, got {step!r}")
    if not 1 <= value < 2**63:
        raise ValueError(
            f"{name} must be >= 1 (the step being taken) and below 2**63, got {step!r}"
        )
    return value


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


def _kept(given: object, number: Any) -> Any:
    """What an optimizer keeps of a checked hyper-parameter: a tensor itself (its value is
    read at each step, as torch.optim reads it), a number as checked (a ``float``)."""
    if isinstance(given, torch.Tensor):
        return given
    if isinstance(given, tuple | list) and isinstance(number, tuple):  # betas
        items = cast("Sequence[object]", given)
        checked_items = cast("tuple[object, ...]", number)
        return tuple(_kept(i, v) for i, v in zip(items, checked_items, strict=True))
    return number


def checked(**values: object) -> dict[str, Any]:
    """The hyper-parameters given, each checked by the rule for its name, in order: numbers
    as ``float``, tensors as given (their values are read again at each step)."""
    return {name: _kept(value, _RULES[name](value)) for name, value in values.items()}
