"""accel's DeepSpeed op builders under the module name of accel 0.1 (now
:mod:`accel.integrations.deepspeed.op_builders`); kept so that imports written against it
keep working."""

from accel.integrations.deepspeed.op_builders import (
    AccelOpBuilder,
    AsyncIOBuilder,
    CPUAdagradBuilder,
    CPUAdamBuilder,
    CPULionBuilder,
    FusedAdamBuilder,
    FusedLionBuilder,
    ShareMemCommBuilder,
    accel_builder,
    accel_builders,
)

__all__ = [
    "AccelOpBuilder",
    "AsyncIOBuilder",
    "CPUAdagradBuilder",
    "CPUAdamBuilder",
    "CPULionBuilder",
    "FusedAdamBuilder",
    "FusedLionBuilder",
    "ShareMemCommBuilder",
    "accel_builder",
    "accel_builders",
]
