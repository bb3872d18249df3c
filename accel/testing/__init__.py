"""Conformance kit: prove a backend honest with one call.

    from accel.testing import check_backend
    report = check_backend(MyAccelerator)
    assert report.ok, report

It runs the hypothesis property checks of the core protocols and of every optional
capability the backend claims (decided by ``isinstance``, not by a list you write), and
reports each violation with the protocol, the method and a minimal counter-example.
Needs the test extra (``pip install accel[test]``: hypothesis).
"""

from __future__ import annotations

from typing import cast

from accel.backends.base import Availability, BackendClass
from accel.protocols import (
    CAPABILITIES,
    CORE_PROTOCOLS,
    OPTIONAL_PROTOCOLS,
    Accelerator,
    CoreAccelerator,
    MemoryAPI,
    missing_members,
)

# Importing the checks registers them in CHECKS.
from accel.testing import checks
from accel.testing._framework import CHECKS, Check, KitConfig, Report, Violation
from accel.testing.checks.generic import (
    members_are_real,
    members_belong_to_the_class,
    members_take_the_protocols_arguments,
    no_partial_capabilities,
)

CORE = CORE_PROTOCOLS
OPTIONAL = OPTIONAL_PROTOCOLS

__all__ = [
    "CHECKS",
    "CORE",
    "OPTIONAL",
    "Check",
    "Report",
    "Violation",
    "check_backend",
    "checks",
    "run_check",
]


def _counterexample(error: BaseException) -> str | None:
    notes: list[str] = getattr(error, "__notes__", [])
    # Hypothesis notes the minimal input as "Falsifying example: ..." (older releases) or
    # "Failing test case: ..." (newer ones).
    falsifying = [
        note for note in notes if note.startswith(("Falsifying example", "Failing test case"))
    ]
    if not falsifying:
        return None
    lines = falsifying[0].split(":", 1)[1].splitlines()
    # Keep the arguments, drop hypothesis's commentary ("# or any other generated value").
    arguments = [line.split("#", 1)[0].strip().rstrip(",") for line in lines[1:]]
    return ", ".join(argument for argument in arguments if argument and argument != ")")


def _violation(protocol: type, method: str, name: str, error: BaseException) -> Violation:
    if isinstance(error, AssertionError):
        message = str(error).splitlines()[0] if str(error) else "assertion failed"
    else:
        message = f"raised {type(error).__name__}: {error}"
    return Violation(protocol.__name__, method, name, message, _counterexample(error))


def run_check(accelerator: Accelerator, check: Check) -> Violation | None:
    """Run one check.

    Args:
        accelerator: The backend instance to check.
        check: A registered check.

    Returns:
        The violation, or ``None`` when the property holds.
    """
    try:
        check.function(accelerator)
    except Exception as error:  # a check reports any failure of the backend as a violation
        return _violation(check.protocol, check.method, check.name, error)
    return None


def _instance(backend: type | Accelerator) -> object:
    if isinstance(backend, (str, bytes)):
        raise TypeError(
            f"check_backend() takes a backend class or instance, got {type(backend).__name__} "
            f"{backend!r} (a registered name: accel._registry.available(name, source))"
        )
    if not isinstance(backend, type):
        return backend
    if callable(getattr(backend, "probe", None)):
        availability = cast(object, cast(BackendClass, backend).probe())
        if not isinstance(availability, Availability):
            raise TypeError(
                f"{backend.__qualname__}.probe() returned {type(availability).__name__} "
                f"{availability!r}, expected accel.backends.base.Availability"
            )
        if not availability.available:
            raise ValueError(f"{backend.__qualname__} is not available here: {availability.reason}")
    instance: object = backend()
    return instance


def check_backend(backend: type | Accelerator, *, max_examples: int = 25) -> Report:
    """Check ``backend`` against every protocol it claims.

    Args:
        backend: A backend class (probed, then instantiated) or instance.
        max_examples: The hypothesis budget of each property.

    Returns:
        The report; ``report.ok`` when no check found a violation.

    Raises:
        ValueError: ``backend`` is a class whose probe says it is not available here, or
            ``max_examples`` is not an int >= 1.
        TypeError: ``backend`` is a string, or a class whose probe answers no
            ``Availability``.
    """
    budget = cast(object, max_examples)  # callers without a type checker pass anything
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"max_examples must be an int >= 1, got {max_examples!r}")
    accelerator = _instance(backend)
    report = Report(type(accelerator).__qualname__)
    missing = missing_members(accelerator)
    if missing or not isinstance(accelerator, CoreAccelerator):
        message = (
            f"does not satisfy accel.Accelerator; missing or not callable: "
            f"{', '.join(missing)}; no check can run"
        )
        report.violations.append(Violation("Accelerator", "*", "core_protocols", message))
        return report
    # A backend without peak statistics is a CoreAccelerator; the checks call only the
    # members of the capabilities it claims.
    checked = cast(Accelerator, accelerator)
    count = cast(object, checked.device_count())
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        # Every check draws device indices below the count: none can run without one.
        message = f"device_count()={count!r} on an available backend; no check can run"
        report.violations.append(Violation("DeviceAPI", "device_count", "core_protocols", message))
        return report
    previous, KitConfig.max_examples = KitConfig.max_examples, max_examples
    try:
        claimed = [p for p in CAPABILITIES if isinstance(checked, p)]
        report.protocols = [p.__name__ for p in claimed]
        for protocol in CAPABILITIES:
            if protocol is MemoryAPI and protocol not in claimed:
                continue  # its halves, MemoryUsageAPI and MemoryStatsAPI, are checked
            generics = (
                (
                    members_are_real,
                    members_belong_to_the_class,
                    members_take_the_protocols_arguments,
                )
                if protocol in claimed
                else (no_partial_capabilities,)
            )
            for generic in generics:
                report.checks_run += 1
                try:
                    generic(checked, protocol)
                except Exception as error:
                    report.violations.append(_violation(protocol, "*", generic.__name__, error))
        for registered in sorted(CHECKS, key=lambda c: CAPABILITIES.index(c.protocol)):
            if registered.protocol in claimed:
                report.checks_run += 1
                violation = run_check(checked, registered)
                if violation is not None:
                    report.violations.append(violation)
    finally:
        KitConfig.max_examples = previous
    return report
