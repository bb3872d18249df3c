"""The instruction-set level of accel's native CPU kernels, and the variable that caps it.

Each kernel is compiled for three x86-64 levels (csrc/common/simd.h): ``x86-64-v4``
(AVX-512), ``x86-64-v3`` (AVX2, FMA, F16C) and ``baseline`` (SSE2). A process uses the
best its CPU runs, or less when ``ACCEL_CPU_ISA`` names a lower level, so one machine can
test and measure every level it has::

    ACCEL_CPU_ISA=x86-64-v3 python -m pytest tests/ops

The variable only lowers the level: ``x86-64-v4`` on an AVX2 machine runs ``x86-64-v3``.
The level is read once per process, when the first extension loads. A bad value is a
``ValueError`` naming it when ``accel.ops`` is imported, and again when an extension loads
(:func:`load_native`: the extensions load on first use, and the variable may have been set
in between), never an ``ImportError`` that would read as "not built".
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from types import ModuleType

ENV = "ACCEL_CPU_ISA"
"""The environment variable that caps the level."""

LEVELS = ("baseline", "x86-64-v3", "x86-64-v4")
"""The levels, lowest first."""

NATIVE_MODULES = ("accel.ops._cpu_optim", "accel.ops._shm_comm")
"""The extensions that read the variable when they load."""


def requested(environ: Mapping[str, str] | None = None) -> str | None:
    """The level ``ACCEL_CPU_ISA`` caps the kernels at, or ``None`` when it is unset.

    Args:
        environ: Where to read the variable; ``None`` for ``os.environ``.

    Returns:
        One of :data:`LEVELS`, or ``None`` when the variable is unset or empty.

    Raises:
        ValueError: The variable holds anything else; the message names it, its value and
            the levels.
    """
    value = (os.environ if environ is None else environ).get(ENV, "")
    if value == "":
        return None
    if value not in LEVELS:
        raise ValueError(f"{ENV} is {value!r}; expected one of {', '.join(LEVELS)} (or unset)")
    return value


def check_before_loading(module: str) -> None:
    """Raise the error for a bad ``ACCEL_CPU_ISA`` while ``module`` would still read it.

    Args:
        module: A module's full name; only :data:`NATIVE_MODULES` read the variable, and
            only when they load (once per process).

    Raises:
        ValueError: ``module`` is one of :data:`NATIVE_MODULES`, has not loaded yet, and
            the variable holds a bad value (the message names it, its value and the levels).
    """
    if module in NATIVE_MODULES and module not in sys.modules:
        requested()


def load_native(module: str) -> ModuleType:
    """``module`` imported, after :func:`check_before_loading`: a bad ``ACCEL_CPU_ISA``,
    set after ``accel.ops`` was imported, is then the ``ValueError`` naming it, not the
    extension's ``ImportError``.

    Args:
        module: The module's full name (``"accel.ops._cpu_optim"``).

    Returns:
        The module.

    Raises:
        ValueError: As :func:`check_before_loading`.
        ImportError: The module does not import (an extension: this install did not build
            it).
    """
    loaded = sys.modules.get(module)
    if loaded is not None:
        return loaded
    check_before_loading(module)
    return importlib.import_module(module)


def active() -> str | None:
    """The level the kernels run at in this process; ``None`` when they are not built.

    Raises:
        ValueError: The kernels have not loaded yet and ``ACCEL_CPU_ISA`` holds a bad value.
    """
    try:
        native = load_native("accel.ops._cpu_optim")
    except ImportError:
        return None
    level: str = native.isa()
    return level


def describe() -> str:
    """One line for reports and benchmark headers, e.g. ``"x86-64-v3 (AVX2+FMA+F16C),
    capped by ACCEL_CPU_ISA; the CPU has x86-64-v4"``.

    Raises:
        ValueError: The kernels have not loaded yet and ``ACCEL_CPU_ISA`` holds a bad value.
    """
    try:
        native = load_native("accel.ops._cpu_optim")
    except ImportError as error:
        return f"not built ({error})"
    line: str = native.simd_level()
    return line
