"""Backends registered under the entry-point group ``accel.backends``.

The built-in backends register through the same group as third-party ones (see
pyproject.toml). A plugin that fails to import (even by calling ``sys.exit``), or whose
class is malformed, or whose probe raises, is logged with its exception and skipped: it
never stops another backend from being used. Two distributions registering one name is an
error naming both. How a probe is asked, with its time limit: :mod:`accel._probe`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from typing_extensions import override

from accel._entry_points import entry_points
from accel._entry_points import load as load_entry_point
from accel._fork_safe import ForkSafeLock
from accel._probe import (
    Unanswered,
    in_process,
    in_thread,
    probe_isolation,
    probe_timeout,
    raised,
)
from accel.backends.base import Availability, BackendClass
from accel.protocols import Accelerator, missing_members

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

logger = logging.getLogger("accel")

GROUP = "accel.backends"

# Used only when accel runs from a source tree that was never installed (no metadata, so
# no entry points): the same targets pyproject.toml registers.
_SOURCE_TREE_BUILTINS = {
    "cpu": "accel.backends.cpu:CPUAccelerator",
    "cuda": "accel.backends.cuda:CUDAAccelerator",
    "xpu": "accel.backends.devices:XPUAccelerator",
    "npu": "accel.backends.devices:NPUAccelerator",
    "hpu": "accel.backends.devices:HPUAccelerator",
    "mlu": "accel.backends.devices:MLUAccelerator",
    "mps": "accel.backends.devices:MPSAccelerator",
    "mtia": "accel.backends.devices:MTIAAccelerator",
    "privateuse1": "accel.backends.devices:PrivateUse1Accelerator",
}


class DuplicateBackendError(RuntimeError):
    """Two distributions register a backend under one name."""


class Registered:
    """One entry of the registry: where it came from, its class or why it has none.

    (A plain class, not a frozen dataclass, which costs ~1 ms to make at import: paid by
    every ``get_accelerator()``.)
    """

    __slots__ = ("_answer", "_probe_lock", "backend", "error", "name", "source", "target")

    def __init__(
        self,
        name: str,
        source: EntryPoint,
        target: str,
        backend: type[Accelerator] | None,
        error: str | None,
    ) -> None:
        self.name = name
        self.source = source  # read for the distribution's name, only when asked
        self.target = target
        self.backend = backend
        self.error = error
        # The probe's answer, computed once: probes may be slow, and selection and
        # `accel report` both ask.
        self._answer: list[Availability] = []
        self._probe_lock = ForkSafeLock()

    @override
    def __repr__(self) -> str:
        return f"Registered({self.name!r}, {self.target!r}, error={self.error!r})"

    @property
    def distribution(self) -> str:
        """The name of the distribution that registered the backend (its metadata's
        ``Name``: parsing it costs ~1 ms, so selection never asks)."""
        return _distribution(self.source)

    @property
    def priority(self) -> int | None:
        """The class's declared priority; ``None`` for a plugin that failed to load (its
        class, which declares it, was never made)."""
        return cast(BackendClass, self.backend).priority if self.backend is not None else None

    def availability(self) -> Availability:
        """The probe's answer, asked once; a failure of any kind is 'not available'.

        A probe that raises, returns something other than an :class:`Availability`, or
        takes longer than :func:`probe_timeout` makes the backend unavailable with that
        reason, logged as a warning naming the backend and its distribution.
        """
        with self._probe_lock:
            if not self._answer:
                self._answer.append(self._probe())
            return self._answer[0]

    def _probe(self) -> Availability:
        if self.backend is None:
            return Availability(False, f"failed to load: {self.error}")
        timeout = probe_timeout()
        if probe_isolation() == "process":
            answer = _answer_in_process(self.target, timeout)
        else:
            answer = in_thread(cast(BackendClass, self.backend), self.name, timeout)
        if isinstance(answer, Availability):
            return answer
        logger.warning(
            "accel backend %r from %s: %s; skipping it",
            self.name, self.distribution, answer.reason, exc_info=answer.error,
        )  # fmt: skip
        return Availability(False, answer.reason)


_process_answers: dict[str, Availability | Unanswered] = {}
_process_lock = ForkSafeLock()


def _answer_in_process(target: str, timeout: float) -> Availability | Unanswered:
    """``target``'s probe, asked in a separate process with those of every other backend
    loaded and not yet asked (a second process only past a probe that overran or crashed):
    one interpreter start for all the backends a selection or a report looks at."""
    with _process_lock:
        if target not in _process_answers:
            with _lock:
                loaded = [entry.target for entry in _loaded.values() if entry.backend is not None]
            targets = [t for t in dict.fromkeys([target, *loaded]) if t not in _process_answers]
            _process_answers.update(in_process(targets, timeout))
        return _process_answers[target]


def _distribution(entry: EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    return str(dist.name) if dist is not None else "<unknown distribution>"


def _distribution_key(entry: EntryPoint) -> str:
    """Which distribution registered ``entry``, for telling two apart: the normalised name
    of its metadata folder where there is one (no metadata file is parsed), else its name."""
    dist = getattr(entry, "dist", None)
    if dist is None:
        return "<unknown distribution>"
    folder: str | None = getattr(dist, "_normalized_name", None)  # importlib's, 3.10+
    return folder if folder else str(dist.name)


class _Loading(threading.local):
    name: str | None = None  # the backend whose module this thread imports


_loading = _Loading()


def loading() -> str | None:
    """The name of the backend whose module this thread is importing, if it is."""
    return _loading.name


def _load(entry: EntryPoint) -> Registered:
    _loading.name = entry.name
    try:
        loaded: object = load_entry_point(entry)
    except KeyboardInterrupt:
        raise  # the user's Ctrl-C, not the plugin's failure
    except BaseException as error:  # SystemExit, GeneratorExit too: a plugin never ends the host
        logger.warning(
            "accel backend %r from %s failed to import; skipping it",
            entry.name, _distribution(entry), exc_info=True,
        )  # fmt: skip
        return Registered(entry.name, entry, entry.value, None, raised(error))
    finally:
        _loading.name = None
    problem = _malformed(entry.name, loaded)
    if problem is not None:
        logger.warning(
            "accel backend %r from %s: %s; skipping it",
            entry.name, _distribution(entry), problem,
        )  # fmt: skip
        return Registered(entry.name, entry, entry.value, None, problem)
    return Registered(entry.name, entry, entry.value, cast("type[Accelerator]", loaded), None)


def _malformed(name: str, loaded: object) -> str | None:
    if not isinstance(loaded, type):
        return f"entry point must name a class, got {type(loaded).__name__}"
    declared = getattr(loaded, "name", None)
    if declared != name:
        return f"class {loaded.__qualname__} declares name {declared!r}, expected {name!r}"
    priority: object = getattr(loaded, "priority", None)
    if isinstance(priority, bool) or not isinstance(priority, int):
        shown = "none" if priority is None else f"{type(priority).__name__} {priority!r}"
        return f"class {loaded.__qualname__} must declare an int priority, got {shown}"
    if not callable(getattr(loaded, "probe", None)):
        return f"class {loaded.__qualname__} must declare a probe() classmethod"
    missing = missing_members(loaded)
    if missing:
        return (
            f"class {loaded.__qualname__} does not satisfy accel.Accelerator; missing or "
            f"not callable: {', '.join(missing)}"
        )
    return None


def _entry_points() -> list[EntryPoint]:
    from importlib.metadata import EntryPoint

    found = entry_points(GROUP)
    if not any(entry.value.startswith("accel.backends.") for entry in found):
        logger.info("accel is not installed (no entry points); using its built-in backends")
        found += [EntryPoint(name, target, GROUP) for name, target in _SOURCE_TREE_BUILTINS.items()]
    return found


def discover(entries: Iterable[EntryPoint] | None = None) -> dict[str, Registered]:
    """Load every registered backend, highest priority first.

    ``DuplicateBackendError`` when two distributions register the same name (the same
    distribution found twice on ``sys.path`` is one registration). ``ValueError`` naming
    ``ACCEL_CPU_ISA`` when it holds no level: the built-in backends import ``accel.ops``,
    which refuses it, and a bad setting must not pass for "no backend is available".
    """
    return _by_priority([_load(entry) for entry in _named(entries).values()])


def _named(entries: Iterable[EntryPoint] | None = None) -> dict[str, EntryPoint]:
    """Each registered name's entry point, nothing imported but ``accel.ops`` (see
    :func:`discover` for the two errors)."""
    import accel.ops  # noqa: F401  # pyright: ignore[reportUnusedImport]  # raises first

    by_name: dict[str, dict[tuple[str, str], EntryPoint]] = {}
    for entry in _entry_points() if entries is None else entries:
        by_name.setdefault(entry.name, {})[(_distribution_key(entry), entry.value)] = entry
    for name, sources in by_name.items():
        if len(sources) > 1:
            described = " and ".join(
                sorted(f"{_distribution(entry)} ({entry.value})" for entry in sources.values())
            )
            raise DuplicateBackendError(f"accel backend name {name!r} is registered by {described}")
    return {name: next(iter(sources.values())) for name, sources in by_name.items()}


def _by_priority(loaded: list[Registered]) -> dict[str, Registered]:
    # Highest priority first; plugins that failed to load (no priority) last.
    loaded.sort(key=lambda r: (r.priority is None, -(r.priority or 0), r.name))
    return {registered.name: registered for registered in loaded}


_lock = ForkSafeLock()
_registry: dict[str, Registered] | None = None
_names: dict[str, EntryPoint] | None = None  # every registered name, nothing imported
_loaded: dict[str, Registered] = {}  # the backends imported so far, by name


def _names_known() -> dict[str, EntryPoint]:
    """Every registered name's entry point, found once. Call with ``_lock`` held."""
    global _names
    if _names is None:
        _names = _named()
    return _names


def _entry_named(name: str) -> Registered | None:
    """The backend registered as ``name``, imported if it was not (and only it: a naming
    ``ACCEL_BACKEND`` does not wait on, or break on, another plugin's import). Call with
    ``_lock`` held."""
    names = _names_known()
    if name not in _loaded and name in names:
        _loaded[name] = _load(names[name])
    return _loaded.get(name)


def registry() -> dict[str, Registered]:
    """The process's registry, every backend imported on first use."""
    global _registry
    with _lock:
        if _registry is None:
            for name in _names_known():
                _entry_named(name)
            _registry = _by_priority(list(_loaded.values()))
        return _registry


def available(name: str, source: str) -> type[Accelerator]:
    """The backend class registered as ``name``, checked to be available here.

    The one lookup behind ``ACCEL_BACKEND``, ``pytest --accel`` and the test suite.
    ``source`` says where the name came from and starts every error: ``ValueError``
    listing the known names for an unknown one, ``RuntimeError`` with the reason for one
    that failed to load or is not available.
    """
    with _lock:
        entry = _entry_named(name)
        known = list(_registry if _registry is not None else _names_known())
    if entry is None:
        raise ValueError(f"{source} names no backend; expected one of: {', '.join(known)}")
    if entry.backend is None:
        raise RuntimeError(
            f"{source}: accelerator backend {name!r} from {entry.distribution} failed to "
            f"load: {entry.error}"
        )
    answer = entry.availability()
    if not answer.available:
        raise RuntimeError(f"{source} selects a backend that is not available: {answer.reason}")
    return entry.backend


def available_backends() -> list[type[Accelerator]]:
    """Every registered backend class that loads and is available here, by priority."""
    return [
        entry.backend
        for entry in registry().values()
        if entry.backend is not None and entry.availability().available
    ]


def reset_registry() -> None:
    """Forget the registry (and the probes' answers); the next use discovers the entry
    points again."""
    global _registry, _names
    with _lock:
        _registry = _names = None
        _loaded.clear()
    with _process_lock:
        _process_answers.clear()
