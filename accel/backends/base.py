"""What every backend class declares for discovery: a name, a priority and a probe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from typing_extensions import Protocol


@dataclass(frozen=True)
class Availability:
    """A probe's answer: whether the backend can run here, and why (shown by ``accel report``)."""

    available: bool
    reason: str

    def __post_init__(self) -> None:
        # Availability("no", ...) would count as available: a truthy string is not an answer.
        if not isinstance(self.available, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"Availability.available must be a bool, got {type(self.available).__name__} "
                f"{self.available!r}"
            )
        if not isinstance(self.reason, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"Availability.reason must be a str, got {type(self.reason).__name__} "
                f"{self.reason!r}"
            )


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
