"""What ``accel report`` shows: versions, the selection and why, every registered backend
with its availability and capabilities, the op builders of the selected backend, and each
integration's section (:func:`accel.extensions.report_sections`)."""

from __future__ import annotations

import io
import platform
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from accel import _registry, extensions
from accel._probe import raised
from accel._selection import current_selection
from accel._version import __version__
from accel.ops.isa import load_native
from accel.protocols import CAPABILITIES, Accelerator, OpBuilderAPI


@dataclass(frozen=True)
class BackendRow:
    """One registered backend. ``capabilities`` values are None where unknowable here."""

    name: str
    distribution: str
    priority: int | None
    """None: the plugin failed to load, so its declared priority is unknown."""
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
    collectives: str
    """How ``accel.comm`` runs collectives here: shared memory for groups on one node (or
    why not), and each rank's pool for ``shared_empty`` tensors."""
    selected: str
    how: str
    detail: str
    device_count: int
    backends: list[BackendRow]
    op_builders: list[OpBuilderRow]
    integrations: dict[str, extensions.ReportSection]
    """Each integration's section (:func:`accel.extensions.report_sections`), by name."""

    def as_dict(self) -> dict[str, object]:
        """The report as JSON-ready data; each integration's section under its name."""
        data: dict[str, object] = asdict(self)
        del data["integrations"]
        return data | {name: dict(section.data) for name, section in self.integrations.items()}


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


def _collectives() -> str:
    """The collectives line: the shared-memory module, and the pool size (or what is wrong
    with its variable). Which path a group takes is decided per call, every rank alike."""
    try:
        load_native("accel.ops._shm_comm")  # a bad ACCEL_CPU_ISA: its ValueError
    except ImportError as error:
        return f"torch.distributed only (accel.ops._shm_comm does not import: {error})"
    from accel.comm._segment import POOL_ENV, pool_bytes

    try:
        pool = pool_bytes()
    except ValueError as error:
        return f"shared memory for groups on one node; no pools: {error}"
    if pool == 0:
        return f"shared memory for groups on one node; no pools ({POOL_ENV}=0)"
    size = f"{pool >> 20} MiB" if pool % (1 << 20) == 0 else f"{pool} bytes"
    return (
        f"shared memory for groups on one node; pools of {size} per rank "
        f"({POOL_ENV}): all-reduce, all-gather, reduce-scatter and broadcast go straight "
        "between tensors from accel.comm.shared_empty, DDP's gradient buckets and "
        "DeepSpeed ZeRO-1/2's flat gradient buckets"
        + "".join(f"; {line}" for line in _pooled_buckets())
    )


def _pooled_buckets() -> list[str]:
    """For each "accel" process group alive in this process (a report collected inside a
    training job), the DDP buckets this rank moved into its pool, and ZeRO-1/2's flat
    buckets made there so far; nothing elsewhere."""
    lines: list[str] = []
    zero = sys.modules.get("accel.integrations.deepspeed.zero")
    if zero is not None:  # DeepSpeed ran on accel here
        counts = zero.COUNTS
        lines.append(
            f"DeepSpeed ZeRO-1/2: {counts.pooled} flat gradient bucket(s) made in the pool "
            f"({counts.pooled_bytes / 2**20:.1f} MiB in all), {counts.plain} elsewhere"
        )
    if "accel.comm.process_group" not in sys.modules:
        return lines  # no "accel" group was ever made here: nothing to import
    from accel.comm.process_group import live_groups

    for group in live_groups():
        sizes = group.promotions.pooled()
        name = getattr(group, "_name", "unnamed")
        lines.append(
            f"group {name!r}: {len(sizes)} DDP bucket(s) in this rank's pool "
            f"({sum(sizes) / 2**20:.1f} MiB)"
        )
    return lines


def _capabilities(
    entry: _registry.Registered, available: bool
) -> tuple[dict[str, bool | None], str | None]:
    """The capability column of ``entry``, and what its constructor raised if it had to be
    made and could not (the capabilities are then unknown)."""
    cls = entry.backend
    unknown: dict[str, bool | None] = {proto.__name__: None for proto in CAPABILITIES}
    if cls is None:
        return unknown, None
    if cls.__new__ is not object.__new__:
        # The constructor picks the instance's class from what the device and torch have
        # (streams and graphs from the device module, MPS's peaks from torch), which is
        # known only where the device is, through an instance.
        if not available:
            # A capability every class it may pick has (or none has) is known all the same.
            variants: tuple[type, ...] = getattr(cls, "instance_classes", lambda: ())()
            if not variants:
                return unknown, None
            return {
                proto.__name__: _all_or_none([issubclass(v, proto) for v in variants])
                for proto in CAPABILITIES
            }, None
        try:
            cls = type(cls())
        except Exception as error:  # the row says it: the report goes on
            return unknown, raised(error)
    return {proto.__name__: issubclass(cls, proto) for proto in CAPABILITIES}, None


def _all_or_none(answers: list[bool]) -> bool | None:
    """True or False where every answer is; None where they differ."""
    return answers[0] if len(set(answers)) == 1 else None


def _backend_rows(failed_to_start: Mapping[str, str]) -> list[BackendRow]:
    rows: list[BackendRow] = []
    for entry in _registry.registry().values():
        availability = entry.availability()
        capabilities, failure = _capabilities(entry, availability.available)
        reason = availability.reason
        failure = failed_to_start.get(entry.name, failure)
        if failure is not None:
            reason += f"; then its constructor raised {failure}"
        rows.append(
            BackendRow(
                name=entry.name,
                distribution=entry.distribution,
                priority=entry.priority,
                available=availability.available,
                reason=reason,
                capabilities=capabilities,
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
    """``"<name> (<Class>)"`` for a backend with a ``name`` attribute, else the class name.

    Args:
        accelerator: Any accelerator.

    Returns:
        The label; ``name`` must be a ``str`` class attribute to count.
    """
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
        collectives=_collectives(),
        selected=backend_label(accelerator),
        how=selection.how,
        detail=selection.detail,
        device_count=accelerator.device_count(),
        backends=_backend_rows(selection.failed_to_start),
        op_builders=_op_builder_rows(accelerator),
        integrations=extensions.report_sections(accelerator, _CORE_KEYS),
    )


# The report's own keys in ``as_dict()``, which no integration's section may replace.
_CORE_KEYS = frozenset(f.name for f in fields(Report)) - {"integrations"}


def _mark(value: bool | None) -> str:
    return {True: "[green]yes[/]", False: "[dim]no[/]", None: "[dim]?[/]"}[value]


def render(report: Report, width: int | None = None) -> str:
    """The report as text tables (``rich``); ``width`` fixes the line width.

    Args:
        report: What :func:`collect` gathered.
        width: The line width; ``None`` (or 0) for 120 characters.

    Returns:
        Plain text (no markup), tables fitted to the width; sentences are never wrapped.
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # Recorded into a buffer and exported as plain text, so the caller decides where it goes.
    # Tables fit the width, without borders; sentences are never broken (soft_wrap), so a
    # saved report greps.
    console = Console(
        width=width or 120, record=True, file=io.StringIO(), highlight=False, soft_wrap=True
    )
    console.print("  ".join(f"{name} {version}" for name, version in report.versions.items()))
    console.print(f"cpu kernels: {report.cpu_kernels}")
    console.print(f"collectives: {report.collectives}", markup=False)
    console.print(f"selected backend: [bold]{escape(report.selected)}[/]")
    console.print(f"chosen by: {report.how} ({report.detail})", markup=False)
    console.print(f"devices: {report.device_count}")

    backends = Table(title="registered backends", title_justify="left", box=None)
    for column in ("backend", "priority", "available", "reason", "distribution"):
        backends.add_column(column)
    for row in report.backends:
        backends.add_row(
            escape(row.name),
            "-" if row.priority is None else str(row.priority),
            _mark(row.available),
            escape(row.reason),
            escape(row.distribution),
        )
    console.print(backends)

    matrix = Table(
        title="capabilities (? = decided when the backend is made, and the device is not here)",
        title_justify="left",
        box=None,
    )
    matrix.add_column("protocol")
    for row in report.backends:
        matrix.add_column(escape(row.name), justify="center")
    for proto in CAPABILITIES:
        matrix.add_row(
            proto.__name__, *(_mark(row.capabilities[proto.__name__]) for row in report.backends)
        )
    console.print(matrix)

    if report.op_builders:
        builders = Table(
            title="op builders of the selected backend", title_justify="left", box=None
        )
        for column in ("op builder", "compatible", "reason"):
            builders.add_column(column)
        for op in report.op_builders:
            builders.add_row(escape(op.name), _mark(op.compatible), escape(op.reason))
        console.print(builders)
    else:
        console.print("op builders: none (the selected backend ships no native ops)")
    for section in report.integrations.values():
        for line in section.lines:
            console.print(line, markup=False)
    return "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())
