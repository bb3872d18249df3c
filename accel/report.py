"""What ``accel report`` shows: versions, the selected backend and its capabilities."""

from __future__ import annotations

import platform
from dataclasses import dataclass

from accel._selection import current_selection
from accel._version import __version__
from accel.protocols import (
    RNGAPI,
    Accelerator,
    DeviceAPI,
    DTypeAPI,
    GraphAPI,
    MemoryAPI,
    OpBuilderAPI,
    ProfilerAPI,
    RuntimeAPI,
    StreamAPI,
    TensorAPI,
)

CAPABILITIES: tuple[type, ...] = (
    DeviceAPI,
    RNGAPI,
    MemoryAPI,
    DTypeAPI,
    TensorAPI,
    RuntimeAPI,
    StreamAPI,
    GraphAPI,
    ProfilerAPI,
    OpBuilderAPI,
)


@dataclass(frozen=True)
class Report:
    """Facts about this environment and the selected accelerator."""

    versions: dict[str, str]
    backend: str
    how: str
    detail: str
    device_count: int
    capabilities: dict[str, bool]


def backend_label(accelerator: Accelerator) -> str:
    """``"<name> (<Class>)"`` for a backend with a ``name`` attribute, else the class name."""
    cls = type(accelerator)
    name = getattr(cls, "name", None)
    return f"{name} ({cls.__qualname__})" if isinstance(name, str) else cls.__qualname__


def collect() -> Report:
    """Select the accelerator if needed and describe it."""
    import torch

    selection = current_selection()
    accelerator = selection.accelerator
    return Report(
        versions={
            "accel": __version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        backend=backend_label(accelerator),
        how=selection.how,
        detail=selection.detail,
        device_count=accelerator.device_count(),
        capabilities={proto.__name__: isinstance(accelerator, proto) for proto in CAPABILITIES},
    )


def render(report: Report) -> str:
    """The report as plain text."""
    lines = [
        "  ".join(f"{name} {version}" for name, version in report.versions.items()),
        f"selected backend: {report.backend}",
        f"chosen by: {report.how} ({report.detail})",
        f"devices: {report.device_count}",
        "capabilities:",
    ]
    width = max(map(len, report.capabilities))
    lines += [
        f"  {name:<{width}}  {'yes' if present else 'no'}"
        for name, present in report.capabilities.items()
    ]
    return "\n".join(lines)
