"""Choosing the process's accelerator: ``get_accelerator()``, ``set_accelerator()``.

Order: an explicit ``set_accelerator(obj)`` wins; otherwise ``ACCEL_BACKEND=<name>`` picks
a registered backend by name; otherwise auto-detection picks the highest-priority
available backend (the CPU last, with a logged warning). The choice is made once per
process, under a lock, so concurrent first calls create a single instance. A backend's
module import, probe or constructor, which run while the choice is made, may not ask for it
(they would wait for themselves): they get a ``RuntimeError``. One that hands the question
to another thread and waits for it cannot be told from a slow probe: the other thread
logs a WARNING after ``SLOW_CHOICE_S`` seconds of waiting, naming the choosing thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Literal, cast

from accel import _registry
from accel._fork_safe import ForkSafeLock
from accel._probe import raised, running_probe
from accel.protocols import Accelerator, CoreAccelerator, missing_members

logger = logging.getLogger("accel")

BACKEND_ENV = "ACCEL_BACKEND"

How = Literal["explicit", "env", "auto"]


@dataclass(frozen=True)
class Selection:
    """The selected accelerator and how it was chosen (``explicit``, ``env`` or ``auto``)."""

    accelerator: Accelerator
    how: How
    detail: str
    failed_to_start: Mapping[str, str] = field(default_factory=dict[str, str])
    """Backends auto-detection passed over because their constructor raised, though their
    probe said available: name -> what it raised."""


_lock = ForkSafeLock()
SLOW_CHOICE_S = 30.0  # a first call waiting longer for another thread's choice is logged
_chooser: str | None = None  # the thread choosing, while it holds _lock
_selection: Selection | None = None
# Read without the lock on the hot path: a plain global read is atomic in CPython.
_current: Accelerator | None = None


class _Starting(threading.local):
    name: str | None = None  # the backend this thread constructs while it holds _lock


_starting = _Starting()


def get_accelerator() -> Accelerator:
    """The accelerator of this process, chosen once, on the first call: the one given to
    :func:`set_accelerator`, else the backend ``ACCEL_BACKEND`` names, else the available
    backend of the highest priority (the CPU last).

    Returns:
        The same instance on every call, until :func:`set_accelerator` or
        :func:`reset_accelerator`.

    Raises:
        ValueError: ``ACCEL_BACKEND`` names no registered backend.
        RuntimeError: The backend ``ACCEL_BACKEND`` names failed to load, is not available
            or failed to start; or no backend is available; or two distributions register
            one backend name.
    """
    accelerator = _current
    if accelerator is not None:
        return accelerator
    return _select().accelerator


def set_accelerator(accelerator: CoreAccelerator) -> None:
    """Use ``accelerator`` from now on.

    Args:
        accelerator: An instance that satisfies :class:`accel.Accelerator`, or
            :class:`accel.protocols.CoreAccelerator` with the peak statistics declared
            absent (``NoMemoryStatsMixin``).

    Raises:
        TypeError: ``accelerator`` is a class, or lacks members of
            :class:`accel.Accelerator` (the message names them).
    """
    if isinstance(accelerator, type):
        raise TypeError(
            f"set_accelerator() expects an accelerator instance, got the class "
            f"{accelerator.__qualname__} (did you mean {accelerator.__qualname__}()?)"
        )
    missing = missing_members(accelerator)
    if missing:
        raise TypeError(
            f"set_accelerator() got {type(accelerator).__qualname__}, which does not satisfy "
            f"accel.Accelerator; missing or not callable: {', '.join(missing)}"
        )
    # get_accelerator() is typed Accelerator for every backend; where the peaks are
    # declared absent they raise CapabilityError (docs/usage.md says to ask first).
    _install(Selection(cast(Accelerator, accelerator), "explicit", "set_accelerator()"))


def reset_accelerator() -> None:
    """Forget the selection; the next ``get_accelerator()`` chooses again (tests, notebooks)."""
    global _selection, _current
    _refuse_from_backend("reset_accelerator")
    with _choice_lock("reset_accelerator"):
        _selection = _current = None


def chosen() -> Selection | None:
    """The selection made so far, without making one.

    Returns:
        The selection, or ``None`` when ``get_accelerator()`` has not chosen yet.
    """
    return _selection


def restore(selection: Selection | None) -> None:
    """Put back a selection :func:`chosen` returned (``None``: forget the selection).

    Args:
        selection: What :func:`chosen` returned.
    """
    if selection is None:
        reset_accelerator()
    else:
        _install(selection)


def current_selection() -> Selection:
    """The selection ``get_accelerator()`` returns, making it first if needed.

    Returns:
        The accelerator, how it was chosen (``"explicit"``, ``"env"`` or ``"auto"``) and
        why.

    Raises:
        ValueError: As :func:`get_accelerator`.
        RuntimeError: As :func:`get_accelerator`.
    """
    return _selection or _select()


def _refuse_from_backend(call: str) -> None:
    for name, part in (
        (_registry.loading(), "import"),
        (_starting.name, "constructor"),
        (running_probe(), "probe()"),
    ):
        if name is not None:
            raise RuntimeError(
                f"accel.{call}() called from the {part} of backend {name!r}, which runs "
                "while the process's accelerator is being chosen: a backend may not ask for "
                "the choice it is part of (use self, or what the backend already knows)"
            )


def _install(selection: Selection) -> None:
    global _selection, _current
    _refuse_from_backend("set_accelerator")
    with _choice_lock("set_accelerator"):
        _selection = selection
        _current = selection.accelerator


def _select() -> Selection:
    global _selection, _current, _chooser
    _refuse_from_backend("get_accelerator")
    with _choice_lock("get_accelerator"):
        if _selection is None:
            _chooser = threading.current_thread().name
            try:
                _selection = _choose()
            finally:
                _chooser = None
            _current = _selection.accelerator
        return _selection


@contextlib.contextmanager
def _choice_lock(call: str) -> Generator[None]:
    """``_lock``, with a WARNING if another thread's choice keeps this one waiting long."""
    if not _lock.acquire(timeout=SLOW_CHOICE_S):
        logger.warning(
            "accel.%s() in thread %r has waited %g s for thread %r, which is choosing the "
            "process's accelerator (importing, probing or constructing backends); if a "
            "backend's import, probe or constructor waits for this thread, the process is "
            "deadlocked: a backend may not ask for the choice it is part of",
            call, threading.current_thread().name, SLOW_CHOICE_S, _chooser,
        )  # fmt: skip
        _lock.acquire()
    try:
        yield
    finally:
        _lock.release()


def _choose() -> Selection:
    requested = os.environ.get(BACKEND_ENV)
    if requested is not None:
        source = f"environment variable {BACKEND_ENV}={requested!r}"
        backend = _registry.available(requested.strip(), source)
        try:
            accelerator = _start(requested.strip(), backend)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # the user asked for this one: say why it cannot be had
            raise RuntimeError(
                f"backend {requested.strip()!r} ({source}) failed to start: {raised(error)}"
            ) from error
        return Selection(accelerator, "env", f"{BACKEND_ENV}={requested}")
    entries = _registry.registry()
    skipped: list[str] = []
    failed: dict[str, str] = {}
    for name, entry in entries.items():
        availability = entry.availability()
        if availability.available and entry.backend is not None:
            try:
                accelerator = _start(name, entry.backend)
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # a broken plugin (sys.exit too) must not stop selection
                failed[name] = raised(error)
                logger.warning(
                    "accel backend %s: its probe said available, then %s; trying the next one",
                    name, failed[name],
                )  # fmt: skip
                skipped.append(name)
                continue
            if name == "cpu" and skipped:
                # The expected state of a CPU-only machine, not a problem: INFO, so every
                # process of a CPU job does not print it (`accel report` says the same).
                logger.info(
                    "no accelerator is available (%s; `accel report` says why); using the CPU",
                    ", ".join(skipped),
                )
            detail = f"highest-priority available: {availability.reason}"
            if failed:
                said = "; ".join(
                    f"{name}: its probe said available, then {error}"
                    for name, error in failed.items()
                )
                detail += f" (failed to start: {said})"
            return Selection(accelerator, "auto", detail, failed)
        skipped.append(name)
        logger.debug("accel backend %r is not available: %s", name, availability.reason)
    raise RuntimeError(
        f"no accelerator backend is available (tried {', '.join(skipped)}); "
        "run `accel report` to see why"
    )


def _start(name: str, backend: type[Accelerator]) -> Accelerator:
    _starting.name = name
    try:
        accelerator = backend()
        # A constructor may return an instance of another class (one composed for the
        # device): what it returns is held to what set_accelerator() holds an instance to.
        missing = missing_members(accelerator)
        if missing:
            raise TypeError(
                f"{backend.__qualname__}() returned {type(accelerator).__qualname__}, which does "
                f"not satisfy accel.Accelerator; missing or not callable: {', '.join(missing)}"
            )
        return accelerator
    finally:
        _starting.name = None
