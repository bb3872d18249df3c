"""Choosing the process's accelerator: ``get_accelerator()``, ``set_accelerator()``.

Order: an explicit ``set_accelerator(obj)`` wins; otherwise ``ACCEL_BACKEND=<name>`` picks
a backend by name; otherwise auto-detection picks the first available backend in
priority order. The choice is made once per process, under a lock, so concurrent first
calls create a single instance.
"""

from __future__ import annotations

import importlib
import inspect
import os
import threading
from dataclasses import dataclass
from typing import Literal

from typing_extensions import get_protocol_members

from accel.protocols import Accelerator

BACKEND_ENV = "ACCEL_BACKEND"

# Built-in backends by name, as "module:Class", highest detection priority first.
# Imported only when selected, so `import accel` stays cheap.
_BUILTIN_BACKENDS: dict[str, str] = {
    "cpu": "accel.backends.cpu:CPUAccelerator",
}

How = Literal["explicit", "env", "auto"]


@dataclass(frozen=True)
class Selection:
    """The selected accelerator and how it was chosen (``explicit``, ``env`` or ``auto``)."""

    accelerator: Accelerator
    how: How
    detail: str


_lock = threading.Lock()
_selection: Selection | None = None
# Read without the lock on the hot path: a plain global read is atomic in CPython.
_current: Accelerator | None = None


def backend_names() -> list[str]:
    """Names accepted by ``ACCEL_BACKEND``, in auto-detection priority order."""
    return list(_BUILTIN_BACKENDS)


def load_backend(name: str) -> type[Accelerator]:
    """The backend class registered as ``name``; ``ValueError`` listing the known names."""
    target = _BUILTIN_BACKENDS.get(name)
    if target is None:
        known = ", ".join(_BUILTIN_BACKENDS)
        raise ValueError(f"unknown accelerator backend {name!r}; expected one of: {known}")
    module_name, _, class_name = target.partition(":")
    backend: type[Accelerator] = getattr(importlib.import_module(module_name), class_name)
    return backend


def get_accelerator() -> Accelerator:
    """The accelerator of this process, chosen on the first call (see module docstring)."""
    accelerator = _current
    if accelerator is not None:
        return accelerator
    return _select().accelerator


def set_accelerator(accelerator: Accelerator) -> None:
    """Use ``accelerator`` from now on; it must satisfy :class:`accel.Accelerator`."""
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
    _install(Selection(accelerator, "explicit", "set_accelerator()"))


def reset_accelerator() -> None:
    """Forget the selection; the next ``get_accelerator()`` chooses again (tests, notebooks)."""
    global _selection, _current
    with _lock:
        _selection = _current = None


def current_selection() -> Selection:
    """The selection ``get_accelerator()`` returns, making it first if needed."""
    return _selection or _select()


def missing_members(obj: object) -> list[str]:
    """Members of :class:`accel.Accelerator` that ``obj`` lacks or has as non-callables."""
    return sorted(
        name
        for name in get_protocol_members(Accelerator)
        if not callable(inspect.getattr_static(obj, name, None))
    )


def _install(selection: Selection) -> None:
    global _selection, _current
    with _lock:
        _selection = selection
        _current = selection.accelerator


def _select() -> Selection:
    global _selection, _current
    with _lock:
        if _selection is None:
            _selection = _choose()
            _current = _selection.accelerator
        return _selection


def _choose() -> Selection:
    requested = os.environ.get(BACKEND_ENV)
    if requested is not None:
        name = requested.strip()
        if name not in _BUILTIN_BACKENDS:
            raise ValueError(
                f"environment variable {BACKEND_ENV}={requested!r} names no backend; "
                f"expected one of: {', '.join(_BUILTIN_BACKENDS)}"
            )
        return Selection(load_backend(name)(), "env", f"{BACKEND_ENV}={requested}")
    skipped: list[str] = []
    for name in _BUILTIN_BACKENDS:
        accelerator = load_backend(name)()
        if accelerator.is_available():
            detail = f"first available of {', '.join(_BUILTIN_BACKENDS)}"
            if skipped:
                detail += f" ({', '.join(skipped)} not available)"
            return Selection(accelerator, "auto", detail)
        skipped.append(name)
    raise RuntimeError(f"no accelerator backend is available; tried: {', '.join(skipped)}")
