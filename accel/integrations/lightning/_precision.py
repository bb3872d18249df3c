"""Mixed precision on the backend's device, in a dtype its DTypeAPI supports.

Lightning autocasts on ``"cuda"`` for every accelerator but ``"cpu"`` and ``"mps"``, and
on the CPU silently swaps fp16 for bf16; these plugins autocast where the backend's
tensors are and refuse a dtype the backend does not support.
"""

from __future__ import annotations

from typing import Literal

import lightning.fabric.plugins.precision as fabric_plugins
import lightning.pytorch.plugins.precision as trainer_plugins
import torch

from accel import get_accelerator

MixedPrecisionName = Literal["bf16-mixed", "16-mixed"]


def fabric_precision(precision: MixedPrecisionName) -> fabric_plugins.MixedPrecision:
    """Fabric's mixed precision, autocasting on the backend's device type.

    Raises:
        ValueError: ``precision`` is not a mixed-precision name, the backend's
            ``DTypeAPI`` does not support its dtype, or torch cannot autocast on the
            backend's device type.
    """
    return fabric_plugins.MixedPrecision(precision=precision, device=_autocast_device(precision))


def trainer_precision(precision: MixedPrecisionName) -> trainer_plugins.MixedPrecision:
    """The Trainer's mixed precision, autocasting on the backend's device type.

    Raises:
        ValueError: as :func:`fabric_precision`.
    """
    return trainer_plugins.MixedPrecision(precision=precision, device=_autocast_device(precision))


def _autocast_device(precision: str) -> str:
    acc = get_accelerator()
    supported = {"bf16-mixed": acc.is_bf16_supported, "16-mixed": acc.is_fp16_supported}
    check = supported.get(precision)
    if check is None:
        raise ValueError(
            f"precision {precision!r}: expected one of {sorted(supported)} (Lightning's other "
            "precisions do not depend on the device: pass them as precision=...)"
        )
    dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
    if not check():
        raise ValueError(
            f"precision {precision!r}: accel's backend {type(acc).__name__} does not support "
            f"{str(dtype).removeprefix('torch.')} (DTypeAPI); it supports "
            f"{acc.supported_dtypes()}"
        )
    device_type = acc.device().type
    try:  # torch's own checks, made when an autocast is built (not entered)
        torch.autocast(device_type=device_type, dtype=dtype)
    except (AssertionError, RuntimeError, ValueError) as error:
        # An out-of-tree device without autocast support failed at the first forward.
        raise ValueError(
            f"precision {precision!r}: torch cannot autocast on {device_type!r} devices "
            f"({type(error).__name__}: {error})"
        ) from None
    return device_type


def check_autocast_device(plugin: object, what: str, factory: str) -> None:
    """Refuse Lightning's mixed precision when it autocasts on another device type than
    accel's backend: its inputs would be cast to 16 bits while the weights, which no
    autocast converts there, stay 32-bit, and the first layer would fail on the dtypes.

    ``what`` names the plugin in the message (who holds it), ``factory`` the function
    that makes the right one.

    Raises:
        ValueError: ``plugin`` autocasts on another device type.
    """
    if not isinstance(plugin, (fabric_plugins.MixedPrecision, trainer_plugins.MixedPrecision)):
        return
    acc = get_accelerator()
    expected = acc.device().type
    if plugin.device != expected:
        # The fix named is one that works: fp16 where the backend has it, else bf16.
        wanted = plugin.precision
        if wanted == "16-mixed" and not acc.is_fp16_supported():
            fix = "bf16-mixed" if acc.is_bf16_supported() else None
            said = f" (which does not support float16: it supports {acc.supported_dtypes()})"
        else:
            fix, said = wanted, ""
        remedy = (
            f"pass plugins=[accel.integrations.lightning.{factory}({fix!r})]"
            if fix is not None
            else "pass a precision without autocast, such as '32-true'"
        )
        raise ValueError(
            f"{what} autocasts on {plugin.device!r}, but accel's backend "
            f"runs on {expected!r}{said} (Lightning picks the autocast device by accelerator "
            f"name); {remedy}"
        )
