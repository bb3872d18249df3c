"""What every backend class declares for discovery: a name, a priority and a probe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, cast

from typing_extensions import Protocol


@dataclass(frozen=True)
class Availability:
    """A probe's answer: whether the backend can run here, and why (shown by ``accel report``)."""

    available: bool
    reason: str

    def __post_init__(self) -> None:
        # Availability("no", ...) would count as available: a string is no answer. Other
        # values keep working as they did (a count, numpy's bool) and are stored as bool.
        answer = cast("object", self.available)  # whatever a probe passed, whatever the type
        if answer is None or isinstance(answer, str | bytes):
            raise TypeError(
                f"Availability.available must be a bool, got {type(answer).__name__} {answer!r}"
            )
        object.__setattr__(self, "available", bool(answer))
        if not isinstance(self.reason, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            object.__setattr__(self, "reason", str(self.reason))


class BackendClass(Protocol):
    """The class-level contract of a registered backend (instances satisfy ``Accelerator``).

    ``probe()`` must be cheap and side-effect free: no device context, no allocation. It
    runs for every registered backend during auto-detection and ``accel report``.
    """

    name: ClassVar[str]
    priority: ClassVar[int]

    @classmethod
    def probe(cls) -> Availability:
        """Whether this backend can run in this process."""
        ...
