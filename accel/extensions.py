"""What integrations add to accel's own commands: a subcommand of ``accel``, a flag of
``accel run``, a section of ``accel report``.

An integration is a subclass of :class:`Integration` that overrides the hooks it needs,
registered under the entry-point group ``accel.integrations`` (name -> class). The
built-in integrations register there as third-party ones do (pyproject.toml), so
``accel/cli.py``, ``accel/launch/cli.py`` and ``accel/report.py`` name none of them: they
call :func:`add_subcommands`, :func:`add_launch_arguments`, :func:`apply_launch` and
:func:`report_sections`. Integrations are loaded when one of those is first called, never
by ``import accel`` or ``get_accelerator()``. How to write one: docs/plugins.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from accel._entry_points import load as load_entry_point
from accel._fork_safe import ForkSafeLock

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from accel.protocols import Accelerator

GROUP = "accel.integrations"

# Used when accel's own entry points for this group are not in its installed metadata (a
# source tree, or an editable install made before the group existed): the same targets
# pyproject.toml registers.
_SOURCE_TREE_BUILTINS = {
    "deepspeed": "accel.integrations.deepspeed.extension:DeepSpeedIntegration",
    "transformers": "accel.integrations.transformers:TransformersIntegration",
}


class IntegrationError(RuntimeError):
    """An integration that cannot be used: it fails to import, names no
    :class:`Integration` subclass, shares its name with another, or clashes with a command,
    flag or report key already taken."""


class Subcommands(Protocol):
    """Where :meth:`Integration.add_subcommands` adds its commands: the object
    ``ArgumentParser.add_subparsers()`` returns."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """Add the subcommand ``name``; ``kwargs`` as for ``ArgumentParser`` (``help=``).

        Args:
            name: The subcommand's name.
            **kwargs: Options of its parser, as ``ArgumentParser`` takes them, and ``help``.

        Returns:
            The subcommand's parser.

        Raises:
            IntegrationError: ``name`` or an alias is already a subcommand (accel's own or
                an integration's), naming the integration.
        """
        ...


class Arguments(Protocol):
    """Where :meth:`Integration.add_launch_arguments` adds its flags: ``accel run``'s
    argument group."""

    def add_argument(self, *name_or_flags: str, **kwargs: Any) -> argparse.Action:
        """Add an option, as ``ArgumentParser.add_argument`` does.

        Args:
            *name_or_flags: The option's flags, e.g. ``"--my-flag"``.
            **kwargs: What ``ArgumentParser.add_argument`` takes (``action=``, ``help=``).

        Returns:
            The option's ``argparse.Action``.

        Raises:
            argparse.ArgumentError: A flag is already taken.
        """
        ...


@dataclass(frozen=True)
class ReportSection:
    """An integration's part of ``accel report``."""

    data: Mapping[str, object]
    """JSON-ready facts, under the integration's name in ``accel report --json``."""
    lines: tuple[str, ...]
    """The text report's lines, printed as they are (no markup)."""


class Integration:
    """What one integration adds to accel's commands; every hook does nothing until
    overridden. accel creates the class with no arguments when a command first needs it."""

    def add_subcommands(self, commands: Subcommands) -> None:
        """Add subcommands of ``accel``.

        Each subcommand's parser must set a ``handler``: a callable taking the parsed
        ``argparse.Namespace`` and returning the exit status
        (``parser.set_defaults(handler=...)``). A ``ValueError``, ``TypeError``,
        ``RuntimeError`` or ``OSError`` it raises is printed as ``accel: error: ...`` with
        exit status 2.

        Args:
            commands: where to add them (``commands.add_parser(name, help=...)``).
        """

    def add_launch_arguments(self, arguments: Arguments) -> None:
        """Add options of ``accel run`` (they sit beside torchrun's own).

        Args:
            arguments: ``accel run``'s "accel" argument group.
        """

    def apply_launch(self, args: argparse.Namespace, environ: MutableMapping[str, str]) -> None:
        """Act on this integration's ``accel run`` options before the ranks start.

        Args:
            args: every parsed option, torchrun's included.
            environ: the launcher's environment, which every rank inherits.

        Raises:
            ValueError: an option that cannot be honoured here; ``accel run`` prints the
                message as a usage error (exit status 2), so it should name the option.
        """

    def report_section(self, accelerator: Accelerator) -> ReportSection | None:
        """This integration's section of ``accel report``, or None for none.

        Args:
            accelerator: the selected backend.

        Returns:
            The section; ``None`` (what this base class returns) for none.
        """
        return None


@dataclass(frozen=True)
class Registered:
    """One loaded integration and where it came from."""

    name: str
    origin: str
    """``accel integration '<name>' from <distribution> (<module:Class>)``, for errors."""
    integration: Integration


def _distribution(entry: EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    return str(dist.name) if dist is not None else "<unknown distribution>"


def _origin(entry: EntryPoint) -> str:
    return f"accel integration {entry.name!r} from {_distribution(entry)} ({entry.value})"


def installed(group: str) -> list[EntryPoint]:
    """The installed entry points of ``group``: ``importlib.metadata``'s answer, read the
    way :mod:`accel._entry_points` reads it.

    Args:
        group: An entry-point group, e.g. :data:`GROUP`.

    Returns:
        Its entry points, in the order ``importlib.metadata`` finds them.
    """
    from accel._entry_points import entry_points

    return entry_points(group)


def _entry_points() -> list[EntryPoint]:
    from importlib.metadata import EntryPoint

    found = installed(GROUP)
    named = {entry.name for entry in found}
    return found + [
        EntryPoint(name, target, GROUP)
        for name, target in _SOURCE_TREE_BUILTINS.items()
        if name not in named
    ]


def _load(entry: EntryPoint) -> Registered:
    origin = _origin(entry)
    try:
        loaded: object = load_entry_point(entry)
    except KeyboardInterrupt:
        raise  # the user's Ctrl-C, not the integration's failure
    except BaseException as error:  # SystemExit too: an integration never ends the command
        raise IntegrationError(
            f"{origin} failed to import: {type(error).__name__}: {error}"
        ) from error
    if not (isinstance(loaded, type) and issubclass(loaded, Integration)):
        raise IntegrationError(
            f"{origin}: expected a subclass of accel.extensions.Integration, got {loaded!r}"
        )
    try:
        integration = loaded()
    except Exception as error:
        raise IntegrationError(
            f"{origin}: {loaded.__qualname__}() raised {type(error).__name__}: {error}"
        ) from error
    return Registered(entry.name, origin, integration)


def discover(entries: list[EntryPoint] | None = None) -> list[Registered]:
    """Load every registered integration.

    Args:
        entries: the entry points to load; by default those installed under
            :data:`GROUP`, plus accel's built-ins its installed metadata lacks.

    Returns:
        The integrations, by name.

    Raises:
        IntegrationError: one fails to import, names no :class:`Integration` subclass, or
            its constructor raises (the message names it), or two registrations share a
            name (the message names both).
    """
    by_name: dict[str, dict[str, EntryPoint]] = {}
    for entry in _entry_points() if entries is None else entries:
        # The same target found twice (one distribution twice on sys.path) is one
        # registration.
        by_name.setdefault(entry.name, {})[entry.value] = entry
    for name, targets in by_name.items():
        if len(targets) > 1:
            described = " and ".join(sorted(_origin(entry) for entry in targets.values()))
            raise IntegrationError(
                f"accel integration name {name!r} is registered twice: {described}"
            )
    return [_load(next(iter(targets.values()))) for _, targets in sorted(by_name.items())]


_lock = ForkSafeLock()
_registered: list[Registered] | None = None


def registered() -> list[Registered]:
    """The process's integrations, loaded on first use (see :func:`discover`)."""
    global _registered
    with _lock:
        if _registered is None:
            _registered = discover()
        return _registered


def reset() -> None:
    """Forget the loaded integrations; the next use discovers them again."""
    global _registered
    with _lock:
        _registered = None


def add_subcommands(commands: Subcommands) -> None:
    """Every integration's subcommands (see :meth:`Integration.add_subcommands`).

    Args:
        commands: Where to add them: ``accel``'s subparsers.

    Raises:
        IntegrationError: A name or alias already taken (by accel or an integration
            before it), naming the integration; or the integrations fail to load (see
            :func:`discover`).
    """
    taken: set[str] = set(getattr(commands, "choices", None) or ())
    for entry in registered():
        entry.integration.add_subcommands(_NewNamesOnly(commands, taken, entry.origin))


class _NewNamesOnly:
    """``accel``'s subparsers as one integration sees them: a name or alias that is taken
    (by accel or an integration before it) is an error naming the integration, on every
    Python version (argparse refuses one only from 3.11; 3.10 replaces the first quietly)."""

    def __init__(self, commands: Subcommands, taken: set[str], origin: str) -> None:
        self._commands, self._taken, self._origin = commands, taken, origin

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        names = [name, *kwargs.get("aliases", ())]
        clash = next((n for n in names if n in self._taken), None)
        if clash is not None:
            raise IntegrationError(
                f"{self._origin}: subcommand {clash!r} is taken (accel's own: "
                f"report, port, run; or an integration's); expected another name"
            )
        parser = self._commands.add_parser(name, **kwargs)
        self._taken.update(names)
        return parser


def add_launch_arguments(arguments: Arguments) -> None:
    """Every integration's ``accel run`` options (see
    :meth:`Integration.add_launch_arguments`).

    Args:
        arguments: ``accel run``'s "accel" argument group.

    Raises:
        IntegrationError: an option already taken, naming the integration; or the
            integrations fail to load (see :func:`discover`).
    """
    for entry in registered():
        try:
            entry.integration.add_launch_arguments(arguments)
        except argparse.ArgumentError as error:
            raise IntegrationError(f"{entry.origin}: {error}") from error


def apply_launch(args: argparse.Namespace, environ: MutableMapping[str, str]) -> None:
    """Let every integration act on its ``accel run`` options (see
    :meth:`Integration.apply_launch`; its ``ValueError`` goes through).

    Args:
        args: Every parsed option of ``accel run``, torchrun's included.
        environ: The launcher's environment, which every rank inherits.

    Raises:
        ValueError: An integration cannot honour one of its options here.
        IntegrationError: The integrations fail to load (see :func:`discover`).
    """
    for entry in registered():
        entry.integration.apply_launch(args, environ)


def report_sections(accelerator: Accelerator, taken: frozenset[str]) -> dict[str, ReportSection]:
    """Every integration's ``accel report`` section, by integration name.

    Args:
        accelerator: the selected backend.
        taken: the report's own keys, which no integration may share.

    Returns:
        The sections by integration name; an integration that returns ``None`` has none.

    Raises:
        IntegrationError: An integration's ``report_section`` raises or returns something
            other than a section or ``None``, or one whose name is one of ``taken`` returns a
            section (both naming the integration); or the
            integrations fail to load (see :func:`discover`).
    """
    sections: dict[str, ReportSection] = {}
    for entry in registered():
        try:
            section = entry.integration.report_section(accelerator)
        except Exception as error:
            raise IntegrationError(
                f"{entry.origin}: report_section raised {type(error).__name__}: {error}"
            ) from error
        if section is None:
            continue
        if not isinstance(section, ReportSection):  # pyright: ignore[reportUnnecessaryIsInstance]  # a plugin's answer
            raise IntegrationError(
                f"{entry.origin}: report_section returned {type(section).__name__} "
                f"{section!r:.80}; expected a ReportSection or None"
            )
        if entry.name in taken:
            raise IntegrationError(
                f"{entry.origin}: its report section would replace the report's own "
                f"{entry.name!r}; expected a name other than {', '.join(sorted(taken))}"
            )
        sections[entry.name] = section
    return sections
