"""The DeepSpeed section of ``accel report``: installed, supported, active, whose builders."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from accel.integrations.deepspeed import _install
from accel.integrations.deepspeed._support import (
    ENV,
    SUPPORTED_RANGE,
    installed_version,
    unsupported_reason,
)
from accel.ops.catalog import deepspeed_builders


@dataclass(frozen=True)
class DeepSpeedStatus:
    """Facts about DeepSpeed and accel's integration in this process."""

    version: str | None
    """The installed deepspeed, or None."""
    supported: bool
    reason: str
    """Why not supported, or the supported range when it is."""
    env: str | None
    """The value of ``ACCEL_DEEPSPEED`` (None when unset)."""
    active: bool
    """Whether DeepSpeed in this process runs on accel now."""
    accel_builders: list[str] = field(default_factory=list[str])
    """DeepSpeed builder classes accel serves for the selected device (the others stay
    DeepSpeed's own, compiled on first use)."""


def collect(device_type: str) -> DeepSpeedStatus:
    """The status for the selected device type (reads metadata; imports no deepspeed).

    Args:
        device_type: The selected backend's device type, e.g. ``"cpu"``.

    Returns:
        The installed deepspeed version, whether accel supports it (and why not, or the
        supported range), ``ACCEL_DEEPSPEED``, whether the integration is active in this
        process, and (for a supported version) the builders accel serves on
        ``device_type``, sorted.
    """
    version = installed_version()
    reason = unsupported_reason(version)
    names = sorted(deepspeed_builders(device_type)) if reason is None else []
    return DeepSpeedStatus(
        version=version,
        supported=reason is None,
        reason=reason or f"supported (deepspeed{SUPPORTED_RANGE})",
        env=os.environ.get(ENV),
        active=_install.is_active(),
        accel_builders=names,
    )


def describe(status: DeepSpeedStatus) -> tuple[str, ...]:
    """``status`` as the lines of ``accel report``.

    Args:
        status: A status from :func:`collect`.

    Returns:
        The version and its support; for a supported version, also whether the integration
        is active, ``ACCEL_DEEPSPEED``, and the builders accel serves.
    """
    version = status.version or "not installed"
    lines = [f"deepspeed: {version} ({status.reason})"]
    if not status.supported:
        return tuple(lines)
    env = "unset" if status.env is None else repr(status.env)
    if status.env is not None and status.env.strip() not in ("0", "1"):
        env += " (expected 0 or 1: importing deepspeed fails until it is fixed)"
    state = "active in this process" if status.active else "not active in this process"
    lines.append(f"accel integration: {state}; {ENV} {env}")
    lines.append(
        "DeepSpeed builders served by accel (prebuilt): "
        + ", ".join(status.accel_builders)
        + "; every other builder is DeepSpeed's own (JIT-compiled on first use)"
    )
    return tuple(lines)
