"""The instruction-set level of accel's native CPU kernels, and the variable that caps it.

Each kernel is compiled for three x86-64 levels (csrc/common/simd.h): ``x86-64-v4``
(AVX-512), ``x86-64-v3`` (AVX2, FMA, F16C) and ``baseline`` (SSE2). A process uses the
best its CPU runs, or less when ``ACCEL_CPU_ISA`` names a lower level, so one machine can
test and measure every level it has::

    ACCEL_CPU_ISA=x86-64-v3 python -m pytest tests/ops

The variable only lowers the level: ``x86-64-v4`` on an AVX2 machine runs ``x86-64-v3``.
The level is read once per process, when the first extension loads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ENV = "ACCEL_CPU_ISA"
"""The environment variable that caps the level."""

LEVELS = ("baseline", "x86-64-v3", "x86-64-v4")
"""The levels, lowest first."""


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


def active() -> str | None:
    """The level the kernels run at in this process; ``None`` when they are not built."""
    try:
        import accel.ops._cpu_optim as native
    except ImportError:
        return None
    return native.isa()


def describe() -> str:
    """One line for reports and benchmark headers, e.g. ``"x86-64-v3 (AVX2+FMA+F16C),
    capped by ACCEL_CPU_ISA; the CPU has x86-64-v4"``."""
    try:
        import accel.ops._cpu_optim as native
    except ImportError as error:
        return f"not built ({error})"
    return native.simd_level()
