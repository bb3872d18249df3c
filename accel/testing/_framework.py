"""Checks, violations and the registry that ``check_backend`` runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from typing_extensions import override

from accel.protocols import Accelerator

CheckFunction = Callable[[Accelerator], None]


@dataclass(frozen=True)
class Violation:
    """One broken promise: which protocol and method, what went wrong, the smallest input."""

    protocol: str
    method: str
    check: str
    message: str
    counterexample: str | None = None

    @override
    def __str__(self) -> str:
        where = f"{self.protocol}.{self.method}"
        text = f"{where}: {self.message} [{self.check}]"
        return (
            f"{text}\n    counter-example: {self.counterexample}" if self.counterexample else text
        )


@dataclass(frozen=True)
class Check:
    """A property of one protocol method (or group of methods)."""

    protocol: type
    method: str
    function: CheckFunction

    @property
    def name(self) -> str:
        """The check's function name, e.g. ``rng_state_round_trips``."""
        return self.function.__name__


@dataclass
class Report:
    """What ``check_backend`` found."""

    backend: str
    protocols: list[str] = field(default_factory=list[str])
    checks_run: int = 0
    violations: list[Violation] = field(default_factory=list[Violation])

    @property
    def ok(self) -> bool:
        """True when no check found a violation."""
        return not self.violations

    @override
    def __str__(self) -> str:
        head = (
            f"{self.backend}: {self.checks_run} checks over {', '.join(self.protocols)}: "
            f"{'all passed' if self.ok else f'{len(self.violations)} violation(s)'}"
        )
        return "\n".join([head, *(f"  - {violation}" for violation in self.violations)])


CHECKS: list[Check] = []


def check(protocol: type, method: str) -> Callable[[CheckFunction], CheckFunction]:
    """Register a check of ``protocol.method``; it runs on every backend claiming ``protocol``.

    Args:
        protocol: The capability protocol the check is about.
        method: The members it exercises, as shown in reports.

    Returns:
        A decorator that registers the check function and returns it unchanged.
    """

    def register(function: CheckFunction) -> CheckFunction:
        CHECKS.append(Check(protocol, method, function))
        return function

    return register


def property_settings(max_examples: int) -> settings:
    """Hypothesis settings for the kit: no deadline (shared machines are noisy), no database.

    Args:
        max_examples: The number of examples each property tries.

    Returns:
        The settings.
    """
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
        print_blob=False,
    )


class KitConfig:
    """Examples per property; ``check_backend(max_examples=...)`` sets it for a run."""

    max_examples = 25
