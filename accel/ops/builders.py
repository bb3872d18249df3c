"""accel's prebuilt op builders under the module name of accel 0.1 (now
:mod:`accel.ops.prebuilt`); kept so that imports written against it keep working."""

from accel.ops.prebuilt import (
    CPU_OP_BUILDERS,
    HOST_OP_BUILDERS,
    AsyncIOBuilder,
    CCLCommBuilder,
    CPUAdagradBuilder,
    CPUAdamBuilder,
    CPULionBuilder,
    CPUOptimBuilder,
    FusedAdamBuilder,
    FusedLionBuilder,
    PrebuiltOpBuilder,
    ShareMemCommBuilder,
)

__all__ = [
    "CPU_OP_BUILDERS",
    "HOST_OP_BUILDERS",
    "AsyncIOBuilder",
    "CCLCommBuilder",
    "CPUAdagradBuilder",
    "CPUAdamBuilder",
    "CPULionBuilder",
    "CPUOptimBuilder",
    "FusedAdamBuilder",
    "FusedLionBuilder",
    "PrebuiltOpBuilder",
    "ShareMemCommBuilder",
]
