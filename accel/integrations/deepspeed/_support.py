"""What the DeepSpeed integration supports, read without importing deepspeed or torch.

``accel run --deepspeed`` and ``accel report`` ask these without importing deepspeed, so
everything here is cheap: the environment and the installed distribution's metadata.
"""

from __future__ import annotations

import re

from accel._validate import env_switch

ENV = "ACCEL_DEEPSPEED"
SUPPORTED_RANGE = ">=0.19.0,<0.20"
"""DeepSpeed releases the adapter and builders were checked against (tested: 0.19.8)."""
_SUPPORTED_MINOR = (0, 19)


def requested() -> bool:
    """Whether ``ACCEL_DEEPSPEED`` asks for the integration (``"1"``); ``"0"`` or unset is off.

    Any other value is an error naming the variable: a typo must not silently run native
    DeepSpeed and its JIT builds. (:mod:`_accel_startup` warns with the same sentence at
    start-up, without importing accel.)
    """
    return env_switch(ENV, default=False)


ZERO_POOL_ENV = "ACCEL_ZERO_POOL"


def zero_pool_enabled() -> bool:
    """Whether ZeRO-1/2's flat gradient buckets may be made in the group's pool
    (:mod:`accel.integrations.deepspeed.zero`): ``ACCEL_ZERO_POOL`` is ``1`` (the default)
    or ``0``.

    Raises:
        ValueError: The variable is set to anything else.
    """
    return env_switch(ZERO_POOL_ENV, default=True)


def installed_version() -> str | None:
    """The installed deepspeed distribution's version, or ``None`` when it is not installed."""
    import importlib.metadata  # ~17 ms: only when the version matters, not at start-up

    try:
        return importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        return None


def unsupported_reason(version: str | None) -> str | None:
    """Why ``version`` cannot be used (``None`` when it can)."""
    if version is None:
        return "deepspeed is not installed"
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None or (int(match[1]), int(match[2])) != _SUPPORTED_MINOR:
        return (
            f"deepspeed {version} is not supported by accel's DeepSpeed integration; "
            f"supported: deepspeed{SUPPORTED_RANGE}"
        )
    return None
