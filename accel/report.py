"""What ``accel report`` shows: versions, the selection and why, every registered backend
with its availability and capabilities, and the op builders of the selected backend."""

from __future__ import annotations

import io
import platform
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from accel import _registry
from accel._selection import current_selection
from accel._version import __version__
from accel.backends.torch_device import DiscoveredTorchDevice
from accel.integrations.deepspeed.status import DeepSpeedStatus
from accel.integrations.deepspeed.status import collect as deepspeed_status
from accel.protocols import CORE_PROTOCOLS, OPTIONAL_PROTOCOLS, Accelerator, OpBuilderAPI

if TYPE_CHECKING:
    from rich.console import Console

CAPABILITIES: tuple[type, ...] = (*CORE_PROTOCOLS, *OPTIONAL_PROTOCOLS)


@dataclass(frozen=True)
class BackendRow:
    """One registered backend. ``capabilities`` values are None where unknowable here."""

    name: str
    distribution: str
    priority: int
    available: bool
    reason: str
    capabilities: dict[str, bool | None]


@dataclass(frozen=True)
class OpBuilderRow:
    """One op builder of the selected backend."""

    name: str
    compatible: bool
    reason: str


@dataclass(frozen=True)
class Report:
    """Facts about this environment and its accelerators."""

    versions: dict[str, str]
    cpu_kernels: str
    """The instruction-set level of the native CPU kernels (:func:`accel.ops.isa.describe`)."""
    selected: str
    how: str
    detail: str
    device_count: int
    backends: list[BackendRow]
    op_builders: list[OpBuilderRow]
    deepspeed: DeepSpeedStatus

    def as_dict(self) -> dict[str, object]:
        """The report as JSON-ready data."""
        return asdict(self)


def _versions() -> dict[str, str]:
    import torch

    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "accel": __version__,
    }
    if torch.version.cuda is not None:
        versions["cuda"] = torch.version.cuda
        from accel.backends.cuda import nvml_driver_version

        driver = nvml_driver_version()
        if driver is not None:
            versions["nvidia driver"] = driver
    if torch.version.hip is not None:
        versions["hip"] = torch.version.hip
    return versions


def _cpu_kernels() -> str:
    from accel.ops import isa  # a bad ACCEL_CPU_ISA raises its ValueError here

    return isa.describe()


def _capabilities(entry: _registry.Registered, available: bool) -> dict[str, bool | None]:
    cls = entry.backend
    unknown: dict[str, bool | None] = {proto.__name__: None for proto in CAPABILITIES}
    if cls is None:
        return unknown
    if issubclass(cls, DiscoveredTorchDevice):
        # Streams and graphs are read from the device module, which exists only where the
        # device does.
        if not available:
            return unknown
        cls = type(cls())
    return {proto.__name__: issubclass(cls, proto) for proto in CAPABILITIES}


def _backend_rows() -> list[BackendRow]:
    rows: list[BackendRow] = []
    for entry in _registry.registry().values():
        availability = entry.availability()
        rows.append(
            BackendRow(
                name=entry.name,
                distribution=entry.distribution,
                priority=entry.priority,
                available=availability.available,
                reason=availability.reason,
                capabilities=_capabilities(entry, availability.available),
            )
        )
    return rows


def _op_builder_rows(accelerator: Accelerator) -> list[OpBuilderRow]:
    if not isinstance(accelerator, OpBuilderAPI):
        return []
    rows: list[OpBuilderRow] = []
    for name in accelerator.op_builder_names():
        builder = accelerator.create_op_builder(name)
        if builder is None:
            rows.append(OpBuilderRow(name, False, "listed but create_op_builder() returned None"))
            continue
        compatible = builder.is_compatible()
        rows.append(OpBuilderRow(name, compatible, builder.incompatibility_reason() or "ready"))
    return rows


def backend_label(accelerator: Accelerator) -> str:
    """``"<name> (<Class>)"`` for a backend with a ``name`` attribute, else the class name."""
    cls = type(accelerator)
    name = getattr(cls, "name", None)
    return f"{name} ({cls.__qualname__})" if isinstance(name, str) else cls.__qualname__


def collect() -> Report:
    """Select the accelerator if needed and describe everything around it."""
    selection = current_selection()
    accelerator = selection.accelerator
    return Report(
        versions=_versions(),
        cpu_kernels=_cpu_kernels(),
        selected=backend_label(accelerator),
        how=selection.how,
        detail=selection.detail,
        device_count=accelerator.device_count(),
        backends=_backend_rows(),
        op_builders=_op_builder_rows(accelerator),
        deepspeed=deepspeed_status(accelerator.device_name()),
    )


def _mark(value: bool | None) -> str:
    return {True: "[green]yes[/]", False: "[dim]no[/]", None: "[dim]?[/]"}[value]


def render(report: Report, width: int | None = None) -> str:
    """The report as text tables (``rich``); ``width`` fixes the line width."""
    from rich.console import Console
    from rich.table import Table

    # Recorded into a buffer and exported as plain text, so the caller decides where it goes.
    # Tables fit the width; sentences are never broken (soft_wrap), so a saved report greps.
    console = Console(
        width=width or 120, record=True, file=io.StringIO(), highlight=False, soft_wrap=True
    )
    console.print("  ".join(f"{name} {version}" for name, version in report.versions.items()))
    console.print(f"cpu kernels: {report.cpu_kernels}")
    console.print(f"selected backend: [bold]{report.selected}[/]")
    console.print(f"chosen by: {report.how} ({report.detail})")
    console.print(f"devices: {report.device_count}")

    backends = Table(title="registered backends", title_justify="left")
    for column in ("backend", "priority", "available", "reason", "distribution"):
        backends.add_column(column)
    for row in report.backends:
        backends.add_row(
            row.name, str(row.priority), _mark(row.available), row.reason, row.distribution
        )
    console.print(backends)

    matrix = Table(title="capabilities (? = unknown: the device is not here)", title_justify="left")
    matrix.add_column("protocol")
    for row in report.backends:
        matrix.add_column(row.name, justify="center")
    for proto in CAPABILITIES:
        matrix.add_row(
            proto.__name__, *(_mark(row.capabilities[proto.__name__]) for row in report.backends)
        )
    console.print(matrix)

    if report.op_builders:
        builders = Table(title="op builders of the selected backend", title_justify="left")
        for column in ("op builder", "compatible", "reason"):
            builders.add_column(column)
        for op in report.op_builders:
            builders.add_row(op.name, _mark(op.compatible), op.reason)
        console.print(builders)
    else:
        console.print("op builders: none (the selected backend ships no native ops)")
    _render_deepspeed(console, report.deepspeed)
    return console.export_text()


def _render_deepspeed(console: Console, status: DeepSpeedStatus) -> None:
    version = status.version or "not installed"
    console.print(f"deepspeed: {version} ({status.reason})")
    if not status.supported:
        return
    env = "unset" if status.env is None else repr(status.env)
    state = "active in this process" if status.active else "not active in this process"
    console.print(f"accel integration: {state}; ACCEL_DEEPSPEED {env}")
    console.print(
        "DeepSpeed builders served by accel (prebuilt): "
        + ", ".join(status.accel_builders)
        + "; every other builder is DeepSpeed's own (JIT-compiled on first use)"
    )
